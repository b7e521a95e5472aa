# torchtpu.fuzz program: seed 9718, mode compiled
t[0] = torch.randn([1, 8], generator=torch.Generator().manual_seed(410855666), dtype=torch.float64).float().to(dev).requires_grad_()  # a parameter  # [0]
t[1] = torch.randn([2, 2], generator=torch.Generator().manual_seed(869411274), dtype=torch.float64).float().to(dev).requires_grad_()  # a parameter  # [1]
t[2] = torch.randn([2, 1], generator=torch.Generator().manual_seed(882071087), dtype=torch.float64).float().to(dev).requires_grad_()  # a parameter  # [2]
t[3] = torch.randn([3, 4], generator=torch.Generator().manual_seed(619942044), dtype=torch.float64).float().to(dev)  # [3]
t[4] = torch.randn([2, 1], generator=torch.Generator().manual_seed(638617031), dtype=torch.float64).float().to(dev)  # [4]
t[5] = torch.randn([1, 1], generator=torch.Generator().manual_seed(509500073), dtype=torch.float64).float().to(dev)  # [5]
t[6] = torch.randint(0, 1, [1], generator=torch.Generator().manual_seed(383163456)).to(dev)  # [6]
with torch.no_grad(): t[7] = t[0].index_fill_(0, t[6], -1.5)  # [7]
t[8] = torch.randn([1, 1], generator=torch.Generator().manual_seed(213642964), dtype=torch.float64).float().to(dev)  # [8]
t[9] = torch.randint(0, 1, [1], generator=torch.Generator().manual_seed(614774319)).to(dev)  # [9]
# -- block 2 (one torch.compile'd function on tpu) --
t[10] = t[5].neg_()  # [10]
(t[1] * _w(t[1])).sum().backward()  # [11]
t[11] = torch.rand([], generator=torch.Generator(dev).manual_seed(350990750), device=dev)  # the CPU takes tpu's values  # [12]
# -- block 3 (one torch.compile'd function on tpu) --
t[12] = torch.where(t[2] > 0, t[2], 0.25)  # [13]
t[13] = t[8].T.contiguous()  # [14]
t[14] = torch.randn([], generator=torch.Generator().manual_seed(337005247), dtype=torch.float64).float().to(dev)  # [15]
t[15] = torch.randn([1, 1], generator=torch.Generator().manual_seed(269965405), dtype=torch.float64).float().to(dev)  # [16]
t[16] = torch.randn([1, 1], generator=torch.Generator().manual_seed(295488628), dtype=torch.float64).float().to(dev)  # [17]
t[17] = torch.randn([2, 1], generator=torch.Generator().manual_seed(599146675), dtype=torch.float64).float().to(dev)  # [18]
# -- block 4 (one torch.compile'd function on tpu) --
torch._foreach_addcmul_([t[10], t[13], t[12]], [t[15], t[16], t[17]], [t[15], t[16], t[17]], value=0.1)  # [19]
# -- block 5 (one torch.compile'd function on tpu) --
t[18] = F.gelu(t[8])  # [20]
t[19] = torch.randn([2, 3], generator=torch.Generator().manual_seed(20170537), dtype=torch.float64).float().to(dev)  # [21]
# -- block 6 (one torch.compile'd function on tpu) --
t[20] = t[1].movedim(0, 1)  # [22]
t[21] = torch.randn([2, 3], generator=torch.Generator().manual_seed(70122500), dtype=torch.float64).float().to(dev)  # [23]
t[22] = torch.randint(0, 2, [2], generator=torch.Generator().manual_seed(175821640)).to(dev)  # [24]
# -- block 7 (one torch.compile'd function on tpu) --
t[23] = t[19].tanh_()  # [25]
del t[23]  # [26]
t[24] = torch.randn([3, 1, 256], generator=torch.Generator().manual_seed(379131609), dtype=torch.float64).float().transpose(-1, -2).contiguous().transpose(-1, -2).to(dev)  # [27]
t[25] = (torch.randn([3, 256, 16], generator=torch.Generator().manual_seed(621080774), dtype=torch.float64).float() * 0.0625).transpose(-1, -2).contiguous().transpose(-1, -2).to(dev)  # [28]
# -- block 8 (one torch.compile'd function on tpu) --
t[26] = torch.bmm(t[24], t[25])  # [29]
t[27] = torch.randn([3, 256, 16], generator=torch.Generator().manual_seed(891526392), dtype=torch.float64).float().to(dev)  # [30]
t[28] = torch.randn([2, 3], generator=torch.Generator().manual_seed(226639626), dtype=torch.float64).float().to(dev)  # [31]
t[29] = torch.randn([1, 1], generator=torch.Generator().manual_seed(660105552), dtype=torch.float64).float().to(dev)  # [32]
# -- block 9 (one torch.compile'd function on tpu) --
torch._foreach_mul_([t[25], t[19], t[13]], [0.505, 0.294, -1.618])  # [33]
t[30] = torch.randn([3, 256, 16], generator=torch.Generator().manual_seed(103965683), dtype=torch.float64).float().to(dev)  # [34]
t[31] = torch.randn([1, 1], generator=torch.Generator().manual_seed(743921472), dtype=torch.float64).float().to(dev)  # [35]
# -- block 10 (one torch.compile'd function on tpu) --
torch._foreach_add_([t[27], t[29]], [t[30], t[31]], alpha=0.5)  # [36]
t[32] = torch.randn([8, 8], generator=torch.Generator().manual_seed(266490429), dtype=torch.float64).float().to(dev)  # [37]
t[33] = torch.randn([1, 768], generator=torch.Generator().manual_seed(31047815), dtype=torch.float64).float().to(dev)  # [38]
t[34] = (torch.randn([256, 768], generator=torch.Generator().manual_seed(455264172), dtype=torch.float64).float() * 0.036084391824351615).transpose(-1, -2).contiguous().transpose(-1, -2).to(dev)  # [39]
t[35] = torch.randn([256], generator=torch.Generator().manual_seed(1023396351), dtype=torch.float64).float().to(dev)  # [40]
# -- block 11 (one torch.compile'd function on tpu) --
t[36] = F.linear(t[33], t[34], t[35])  # [41]
# upstream at instruction 19: aot_eager on the CPU differs too: t12: max difference 0.775 at [0, 0]: -0.51175463 on tpu, 0.26277071 on the CPU, 0.26277072 in float64
