# torchtpu.fuzz program: seed 9766, mode compiled
t[0] = torch.randn([31, 8], generator=torch.Generator().manual_seed(607958201), dtype=torch.float64).float().to(dev).requires_grad_()  # a parameter  # [0]
t[1] = torch.randn([4, 1], generator=torch.Generator().manual_seed(156696041), dtype=torch.float64).float().to(dev).requires_grad_()  # a parameter  # [1]
t[2] = torch.randn([2], generator=torch.Generator().manual_seed(644551040), dtype=torch.float64).float().to(dev).requires_grad_()  # a parameter  # [2]
t[3] = torch.randn([], generator=torch.Generator().manual_seed(208699455), dtype=torch.float64).float().to(dev)  # [3]
t[4] = torch.randn([1], generator=torch.Generator().manual_seed(582300008), dtype=torch.float64).float().to(dev)  # [4]
t[5] = torch.randn([5], generator=torch.Generator().manual_seed(375033905), dtype=torch.float64).float().to(dev)  # [5]
# -- block 1 (one torch.compile'd function on tpu) --
t[6] = torch.log(t[1].abs() + 1)  # [6]
t[7] = t[5][2::1]  # [7]
t[8] = torch.randn([1], generator=torch.Generator().manual_seed(834547749), dtype=torch.float64).float().to(dev)  # [8]
t[9] = torch.randint(0, 2, [1], generator=torch.Generator().manual_seed(1022720895)).to(dev)  # [9]
with torch.no_grad(): t[10] = t[2].addcmul_(t[8], t[8], value=-0.1)  # [10]
t[11] = torch.randn([2], generator=torch.Generator().manual_seed(619683649), dtype=torch.float64).float().to(dev)  # [11]
t[12] = torch.randint(0, 2, [2], generator=torch.Generator().manual_seed(602569651)).to(dev)  # [12]
with torch.no_grad(): t[13] = t[2].clamp_(-1, 1)  # [13]
t[14] = torch.randint(0, 2, [2], generator=torch.Generator().manual_seed(72780803)).to(dev)  # [14]
with torch.no_grad(): t[15] = t[13].addcmul_(t[11], t[11], value=-0.1)  # [15]
# -- block 2 (one torch.compile'd function on tpu) --
t[16] = t[13].split(1, 0)[-1]  # [16]
t[17] = torch.randint(0, 2, [2], generator=torch.Generator().manual_seed(461682607)).to(dev)  # [17]
with torch.no_grad(): t[18] = t[2].clamp_(-1, 1)  # [18]
t[19] = torch.randint(0, 2, [2], generator=torch.Generator().manual_seed(128124747)).to(dev)  # [19]
with torch.no_grad(): t[20] = t[18].addcmul_(t[11], t[11], value=-0.1)  # [20]
# -- block 3 (one torch.compile'd function on tpu) --
t[21] = t[18].split(1, 0)[-1]  # [21]
t[22] = torch.floor(t[3])  # [22]
t[7].bernoulli_(0.3, generator=torch.Generator(dev).manual_seed(491212264))  # the CPU takes tpu's values  # [23]
t[23] = torch.randn([5], generator=torch.Generator().manual_seed(99043841), dtype=torch.float64).float().to(dev)  # [24]
t[24] = torch.randn([1], generator=torch.Generator().manual_seed(659469672), dtype=torch.float64).float().to(dev)  # [25]
t[25] = torch.randn([4, 1], generator=torch.Generator().manual_seed(953764647), dtype=torch.float64).float().to(dev)  # [26]
# -- block 4 (one torch.compile'd function on tpu) --
torch._foreach_mul_([t[5], t[4], t[6]], [-1.259, 1.681, -0.383])  # [27]
(t[1] * _w(t[1])).sum().backward()  # [28]
t[26] = torch.randn([128, 1024], generator=torch.Generator().manual_seed(1013263241), dtype=torch.float64).float().to(dev)  # [29]
t[27] = (torch.randn([1024, 512], generator=torch.Generator().manual_seed(975720120), dtype=torch.float64).float() * 0.03125).transpose(-1, -2).contiguous().transpose(-1, -2).to(dev)  # [30]
# -- block 5 (one torch.compile'd function on tpu) --
t[28] = torch.mm(t[26], t[27])  # [31]
for p in params: p.grad = None  # [32]
opt.step()  # adamw_foreach over the parameters  # [33]
t[29] = torch.randn([1], generator=torch.Generator().manual_seed(618960193), dtype=torch.float64).float().to(dev)  # [34]
# -- block 6 (one torch.compile'd function on tpu) --
t[30] = t[4] + 2.5 * t[29]  # [35]
t[31] = (torch.randn([128, 256], generator=torch.Generator().manual_seed(574751579), dtype=torch.float64).float() * 0.08838834764831843).to(dev).requires_grad_()  # a parameter  # [36]
t[32] = torch.randn([256, 128], generator=torch.Generator().manual_seed(419157124), dtype=torch.float64).float().to(dev)  # [37]
# -- block 7 (one torch.compile'd function on tpu) --
t[33] = t[32] @ t[31]  # [38]
t[34] = torch.tanh(t[33])  # [39]
# -- block 8 (one torch.compile'd function on tpu) --
(t[34] * _w(t[34])).sum().backward()  # [40]
opt.step()  # adamw_foreach over the parameters  # [41]
for p in params: p.grad = None  # [42]
# -- block 9 (one torch.compile'd function on tpu) --
t[35] = t[32] @ t[31]  # [43]
t[36] = torch.tanh(t[35])  # [44]
# -- block 10 (one torch.compile'd function on tpu) --
(t[36] * _w(t[36])).sum().backward()  # [45]
opt.step()  # adamw_foreach over the parameters  # [46]
# -- block 11 (one torch.compile'd function on tpu) --
t[37] = t[32] @ t[31]  # [47]
t[38] = F.gelu(t[37])  # [48]
(t[38] * _w(t[38])).sum().backward()  # [49]
opt.step()  # adamw_foreach over the parameters  # [50]
# upstream at instruction 27: compiled on tpu: RuntimeError("output with shape [4, 1] doesn't match the broadcast shape [4, 5]")
