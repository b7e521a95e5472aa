# torchtpu.fuzz program: seed 9708, mode compiled
t[0] = torch.randn([31, 2], generator=torch.Generator().manual_seed(1060947299), dtype=torch.float64).float().to(dev).requires_grad_()  # a parameter  # [0]
t[1] = torch.randn([8], generator=torch.Generator().manual_seed(965148323), dtype=torch.float64).float().to(dev).requires_grad_()  # a parameter  # [1]
t[2] = torch.randn([], generator=torch.Generator().manual_seed(955376910), dtype=torch.float64).float().to(dev)  # [2]
t[3] = torch.randn([3, 5], generator=torch.Generator().manual_seed(997672134), dtype=torch.float64).float().to(dev)  # [3]
# -- block 1 (one torch.compile'd function on tpu) --
t[4] = t[1].squeeze()  # [4]
t[5] = t[1].select(0, 7)  # [5]
t[6] = (t[0] > 0).sum()  # [6]
t[7] = torch.randn([512, 512], generator=torch.Generator().manual_seed(1041715299), dtype=torch.float64).float().to(dev)  # [7]
t[8] = (torch.randn([1, 512], generator=torch.Generator().manual_seed(172452432), dtype=torch.float64).float() * 0.044194173824159216).to(dev)  # [8]
t[9] = torch.randn([1], generator=torch.Generator().manual_seed(131396773), dtype=torch.float64).float().to(dev)  # [9]
# -- block 2 (one torch.compile'd function on tpu) --
t[10] = F.linear(t[7], t[8], t[9])  # [10]
# -- block 3 (one torch.compile'd function on tpu) --
t[11] = t[1].squeeze()  # [11]
(t[11] * _w(t[11])).sum().backward()  # [12]
del t[6]  # [13]
# -- block 4 (one torch.compile'd function on tpu) --
t[12] = t[10].view([-1])  # [14]
t[13] = torch.randn([7, 8, 31], generator=torch.Generator(dev).manual_seed(879287579), device=dev)  # the CPU takes tpu's values  # [15]
t[14] = torch.randint(0, 1, [2], generator=torch.Generator().manual_seed(61535513)).to(dev)  # [16]
t[15] = torch.randint(0, 1, [1], generator=torch.Generator().manual_seed(699394898)).to(dev)  # [17]
t[16] = torch.randint(0, 1, [4], generator=torch.Generator().manual_seed(811007190)).to(dev)  # [18]
# -- block 5 (one torch.compile'd function on tpu) --
t[17] = t[9].scatter_add(0, t[15], t[9])  # [19]
t[18] = torch.randn([1, 1], generator=torch.Generator().manual_seed(18812957), dtype=torch.float64).float().to(dev)  # [20]
# -- block 6 (one torch.compile'd function on tpu) --
t[19] = t[0] + 2.5 * t[18]  # [21]
t[20] = t[18].cumsum(1)  # [22]
# -- block 7 (one torch.compile'd function on tpu) --
t[21] = t[17].expand([3])  # [23]
t[22] = torch.relu(t[11])  # [24]
t[23] = torch.randn([8], generator=torch.Generator().manual_seed(26005479), dtype=torch.float64).float().to(dev)  # [25]
# -- block 9 (one torch.compile'd function on tpu) --
t[24] = t[12].narrow(0, 152, 79)  # [26]
t[25] = torch.randn([1], generator=torch.Generator().manual_seed(773577175), dtype=torch.float64).float().to(dev)  # [27]
t[26] = torch.randint(0, 512, [3], generator=torch.Generator().manual_seed(244786478)).to(dev)  # [28]
with torch.no_grad(): t[27] = t[12].lerp_(t[25], 0.25)  # [29]
# -- block 10 (one torch.compile'd function on tpu) --
t[28] = t[18].expand([3, 1])  # [30]
t[12].uniform_(-1, 1, generator=torch.Generator(dev).manual_seed(620174107))  # the CPU takes tpu's values  # [31]
# -- block 11 (one torch.compile'd function on tpu) --
t[29] = t[8].norm(p=1, dim=1)  # [32]
t[30] = torch.randn([1], generator=torch.Generator().manual_seed(173453688), dtype=torch.float64).float().to(dev)  # [33]
t[31] = torch.randint(0, 8, [4], generator=torch.Generator().manual_seed(230399875)).to(dev)  # [34]
with torch.no_grad(): t[32] = t[23].clamp_(-1, 1)  # [35]
# -- block 12 (one torch.compile'd function on tpu) --
(t[19] * _w(t[19])).sum().backward()  # [36]
t[12].uniform_(-1, 1, generator=torch.Generator(dev).manual_seed(620174107))  # the CPU takes tpu's values  # [37]
# -- block 13 (one torch.compile'd function on tpu) --
t[33] = t[8].norm(p=1, dim=1)  # [38]
t[34] = torch.randn([1], generator=torch.Generator().manual_seed(85171320), dtype=torch.float64).float().to(dev)  # [39]
t[35] = torch.randint(0, 8, [4], generator=torch.Generator().manual_seed(174569070)).to(dev)  # [40]
with torch.no_grad(): t[36] = t[23].clamp_(-1, 1)  # [41]
# -- block 14 (one torch.compile'd function on tpu) --
(t[19] * _w(t[19])).sum().backward()  # [42]
# upstream at instruction 42: compiled on tpu: RuntimeError('Trying to backward through the graph a second time (or directly access saved tensors after they have already been freed). Saved intermediate values of the graph are freed when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second time or if you need to access saved tensors after calling backward.')
