# torchtpu.fuzz program: seed 9736, mode compiled
t[0] = torch.randn([2], generator=torch.Generator().manual_seed(304198340), dtype=torch.float64).float().to(dev).requires_grad_()  # a parameter  # [0]
t[1] = torch.randn([16, 4], generator=torch.Generator().manual_seed(914049781), dtype=torch.float64).float().to(dev).requires_grad_()  # a parameter  # [1]
t[2] = torch.randn([5, 16], generator=torch.Generator().manual_seed(295931083), dtype=torch.float64).float().to(dev).requires_grad_()  # a parameter  # [2]
t[3] = torch.randn([2, 7, 1], generator=torch.Generator().manual_seed(52593384), dtype=torch.float64).float().to(dev)  # [3]
t[7] = torch.randn([2, 7, 1], generator=torch.Generator().manual_seed(638335611), dtype=torch.float64).float().to(dev)  # [4]
# -- block 1 (one torch.compile'd function on tpu) --
t[8] = t[1].mean(1, keepdim=False)  # [5]
t[9] = torch.randn([2, 7, 1], generator=torch.Generator().manual_seed(493857903), dtype=torch.float64).float().to(dev)  # [6]
t[10] = torch.randn([2, 7, 1], generator=torch.Generator().manual_seed(584145953), dtype=torch.float64).float().to(dev)  # [7]
# -- block 2 (one torch.compile'd function on tpu) --
torch._foreach_mul_([t[7], t[3]], 0.75)  # [8]
t[11] = torch.randint(0, 7, [5], generator=torch.Generator().manual_seed(18705333)).to(dev)  # [9]
with torch.no_grad(): t[12] = t[9].mul_(1.25)  # [10]
# -- block 3 (one torch.compile'd function on tpu) --
t[13] = torch.atan(t[1])  # [11]
t[14] = torch.randn([2, 7, 1], generator=torch.Generator().manual_seed(266122869), dtype=torch.float64).float().to(dev)  # [12]
t[15] = torch.randint(0, 7, [4], generator=torch.Generator().manual_seed(423985709)).to(dev)  # [13]
# -- block 4 (one torch.compile'd function on tpu) --
t[16] = t[7].sub_(t[14]).div_(2)  # [14]
t[17] = torch.randn([], generator=torch.Generator().manual_seed(377182980), dtype=torch.float64).float().to(dev)  # [15]
t[18] = torch.randn([4, 5], generator=torch.Generator(dev).manual_seed(456511186), device=dev)  # the CPU takes tpu's values  # [16]
t[19] = torch.randn([1, 1, 1], generator=torch.Generator().manual_seed(390002222), dtype=torch.float64).float().to(dev)  # [17]
t[20] = torch.randint(0, 2, [2], generator=torch.Generator().manual_seed(950239898)).to(dev)  # [18]
# -- block 5 (one torch.compile'd function on tpu) --
t[21] = t[10].addcmul_(t[19], t[19], value=-0.1)  # [19]
t[22] = torch.randn([2, 7, 1], generator=torch.Generator().manual_seed(832743218), dtype=torch.float64).float().to(dev)  # [20]
t[23] = torch.randn([16], generator=torch.Generator().manual_seed(147177356), dtype=torch.float64).float().to(dev)  # [21]
t[24] = torch.randn([2, 7, 1], generator=torch.Generator().manual_seed(16768188), dtype=torch.float64).float().to(dev)  # [22]
t[25] = torch.randn([2, 7, 1], generator=torch.Generator().manual_seed(233487909), dtype=torch.float64).float().to(dev)  # [23]
# -- block 6 (one torch.compile'd function on tpu) --
t[26], t[27], t[28], t[29], = torch._foreach_sqrt([x.abs() for x in [t[9], t[8], t[10], t[16]]])  # [24]
t[24].uniform_(-1, 1, generator=torch.Generator(dev).manual_seed(752950686))  # the CPU takes tpu's values  # [25]
# -- block 7 (one torch.compile'd function on tpu) --
(t[8] * _w(t[8])).sum().backward()  # [26]
t[30] = t[0].reshape([2])  # [27]
t[31] = torch.randn([1, 31], generator=torch.Generator().manual_seed(584193043), dtype=torch.float64).float().to(dev)  # [28]
# -- block 8 (one torch.compile'd function on tpu) --
t[32], t[33], t[34], t[35], = torch._foreach_sqrt([x.abs() for x in [t[9], t[8], t[10], t[16]]])  # [29]
t[24].uniform_(-1, 1, generator=torch.Generator(dev).manual_seed(752950686))  # the CPU takes tpu's values  # [30]
# -- block 9 (one torch.compile'd function on tpu) --
(t[8] * _w(t[8])).sum().backward()  # [31]
t[36] = t[0].reshape([2])  # [32]
t[37] = torch.randn([1, 31], generator=torch.Generator().manual_seed(283750519), dtype=torch.float64).float().to(dev)  # [33]
t[38] = torch.randn([8, 7], generator=torch.Generator().manual_seed(938317672), dtype=torch.float64).float().to(dev)  # [34]
t[39] = torch.randint(0, 1, [1], generator=torch.Generator().manual_seed(148249034)).to(dev)  # [35]
t[40] = torch.randint(0, 2, [7], generator=torch.Generator().manual_seed(133432683)).to(dev)  # [36]
# -- block 10 (one torch.compile'd function on tpu) --
t[41] = t[3].index_select(2, t[39])  # [37]
t[42] = torch.randn([2, 7, 1], generator=torch.Generator().manual_seed(995176016), dtype=torch.float64).float().to(dev)  # [38]
# -- block 11 (one torch.compile'd function on tpu) --
torch.sum(t[21], -1, keepdim=True, out=t[42])  # [39]
# upstream at instruction 31: compiled on tpu: RuntimeError('Trying to backward through the graph a second time (or directly access saved tensors after they have already been freed). Saved intermediate values of the graph are freed when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second time or if you need to access saved tensors after calling backward.')
