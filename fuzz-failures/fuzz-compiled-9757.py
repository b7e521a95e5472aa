# torchtpu.fuzz program: seed 9757, mode compiled
t[0] = torch.randn([5, 2], generator=torch.Generator().manual_seed(440921670), dtype=torch.float64).float().to(dev).requires_grad_()  # a parameter  # [0]
t[1] = torch.randn([5, 3], generator=torch.Generator().manual_seed(841371991), dtype=torch.float64).float().to(dev).requires_grad_()  # a parameter  # [1]
t[2] = torch.randn([], generator=torch.Generator().manual_seed(828388792), dtype=torch.float64).float().to(dev)  # [2]
t[3] = torch.randn([8, 1, 2], generator=torch.Generator().manual_seed(966201098), dtype=torch.float64).float().to(dev)  # [3]
# -- block 1 (one torch.compile'd function on tpu) --
t[4] = (t[0] > 0).sum()  # [4]
t[5] = torch.randn([5, 2], generator=torch.Generator().manual_seed(410711402), dtype=torch.float64).float().to(dev)  # [5]
# -- block 2 (one torch.compile'd function on tpu) --
t[6] = torch.hypot(t[0], t[5].abs() + 0.5)  # [6]
opt.step()  # sgd over the parameters  # [7]
t[7] = torch.randn([5, 2], generator=torch.Generator().manual_seed(150884351), dtype=torch.float64).float().to(dev)  # [8]
t[8] = torch.randn([5, 2], generator=torch.Generator().manual_seed(127477633), dtype=torch.float64).float().to(dev)  # [9]
t[9] = torch.randn([8, 1, 2], generator=torch.Generator().manual_seed(20481514), dtype=torch.float64).float().to(dev)  # [10]
# -- block 3 (one torch.compile'd function on tpu) --
t[10], t[11], t[12], = torch._foreach_add([t[5], t[6], t[3]], [t[7], t[8], t[9]])  # [11]
t[13] = t[7].std([1])  # [12]
t[14] = torch.randn([1, 2], generator=torch.Generator().manual_seed(863756520), dtype=torch.float64).float().to(dev)  # [13]
# -- block 4 (one torch.compile'd function on tpu) --
t[15] = torch.addcmul(t[8], t[14], t[14], value=0.5)  # [14]
t[16] = torch.randint(0, 1, [8], generator=torch.Generator().manual_seed(47442356)).to(dev)  # [15]
t[17] = torch.randint(0, 1, [1, 2], generator=torch.Generator().manual_seed(492265310)).to(dev)  # [16]
t[18] = torch.randint(0, 1, [8], generator=torch.Generator().manual_seed(977730624)).to(dev)  # [17]
# -- block 5 (one torch.compile'd function on tpu) --
t[19] = t[14].scatter_add(0, t[17], t[14])  # [18]
# -- block 6 (one torch.compile'd function on tpu) --
t[20] = t[6].abs()  # [19]
t[21] = t[5].chunk(2, 1)[0]  # [20]
t[22] = torch.randn([2], generator=torch.Generator().manual_seed(636660905), dtype=torch.float64).float().to(dev)  # [21]
t[23] = torch.randint(0, 10, [2], generator=torch.Generator().manual_seed(194569450)).to(dev)  # [22]
t[24] = torch.randint(0, 5, [3], generator=torch.Generator().manual_seed(451543777)).to(dev)  # [23]
t[25] = torch.randint(0, 5, [5, 2], generator=torch.Generator().manual_seed(873250918)).to(dev)  # [24]
t[26] = torch.randint(0, 5, [2], generator=torch.Generator().manual_seed(867406381)).to(dev)  # [25]
# -- block 7 (one torch.compile'd function on tpu) --
t[27] = t[5][t[24]]  # [26]
t[28] = torch.randn([1024, 256], generator=torch.Generator().manual_seed(174312904), dtype=torch.float64).float().to(dev)  # [27]
t[29] = (torch.randn([16, 256], generator=torch.Generator().manual_seed(297650755), dtype=torch.float64).float() * 0.0625).transpose(-1, -2).contiguous().transpose(-1, -2).to(dev)  # [28]
# -- block 8 (one torch.compile'd function on tpu) --
t[30] = F.linear(t[28], t[29])  # [29]
t[31] = t[30].flip(1)  # [30]
(t[10] * _w(t[10])).sum().backward()  # [31]
t[32] = torch.randint(0, 5, [1], generator=torch.Generator().manual_seed(491633693)).to(dev)  # [32]
t[33] = torch.randint(0, 5, [5, 1], generator=torch.Generator().manual_seed(461100822)).to(dev)  # [33]
t[34] = torch.randint(0, 5, [4], generator=torch.Generator().manual_seed(219333018)).to(dev)  # [34]
# -- block 9 (one torch.compile'd function on tpu) --
t[35] = t[21].index_select(0, t[32])  # [35]
t[36] = t[6].transpose(1, 0)  # [36]
t[27].bernoulli_(0.3, generator=torch.Generator(dev).manual_seed(38192026))  # the CPU takes tpu's values  # [37]
t[37] = torch.randn([5, 1], generator=torch.Generator().manual_seed(85690921), dtype=torch.float64).float().to(dev)  # [38]
# -- block 10 (one torch.compile'd function on tpu) --
t[38] = torch.add(t[21], t[37], alpha=0.5)  # [39]
# upstream at instruction 29: aot_eager on the CPU differs too: param 0 .grad: Tensor on tpu, NoneType on the CPU
