# torchtpu.fuzz program: seed 9756, mode compiled
t[0] = torch.randn([1, 2], generator=torch.Generator().manual_seed(152134474), dtype=torch.float64).float().to(dev).requires_grad_()  # a parameter  # [0]
t[1] = torch.randn([1, 3], generator=torch.Generator().manual_seed(522018918), dtype=torch.float64).float().to(dev).requires_grad_()  # a parameter  # [1]
t[2] = torch.randn([5], generator=torch.Generator().manual_seed(719199022), dtype=torch.float64).float().to(dev)  # [2]
t[3] = torch.randn([8], generator=torch.Generator().manual_seed(658963985), dtype=torch.float64).float().to(dev)  # [3]
t[4] = torch.randn([5], generator=torch.Generator().manual_seed(815541449), dtype=torch.float64).float().to(dev)  # [4]
# -- block 1 (one torch.compile'd function on tpu) --
t[5] = torch.lerp(t[2], t[4], 0.3)  # [5]
t[6] = torch.randn([1, 3], generator=torch.Generator().manual_seed(1015260657), dtype=torch.float64).float().to(dev)  # [6]
t[7] = torch.randint(0, 3, [1], generator=torch.Generator().manual_seed(525792615)).to(dev)  # [7]
with torch.no_grad(): t[8] = t[1].sub_(t[6]).div_(2)  # [8]
# -- block 2 (one torch.compile'd function on tpu) --
t[9] = t[5].t()  # [9]
t[10] = torch.randn([4, 3, 5, 16], generator=torch.Generator().manual_seed(767473107), dtype=torch.float64).float().to(dev)  # [10]
t[11] = torch.randn([8], generator=torch.Generator().manual_seed(771230592), dtype=torch.float64).float().to(dev)  # [11]
t[12] = torch.randint(0, 8, [5], generator=torch.Generator().manual_seed(706192866)).to(dev)  # [12]
with torch.no_grad(): t[13] = t[3].mul_(1.25)  # [13]
t[14] = torch.randn([5, 8, 7], generator=torch.Generator().manual_seed(227105803), dtype=torch.float64).float().to(dev)  # [14]
# -- block 3 (one torch.compile'd function on tpu) --
t[15] = t[14].abs()  # [15]
t[16] = (torch.randn([128, 256], generator=torch.Generator().manual_seed(141625109), dtype=torch.float64).float() * 0.0625).to(dev).requires_grad_()  # a parameter  # [16]
t[17] = torch.randn([512, 256], generator=torch.Generator().manual_seed(369064830), dtype=torch.float64).float().to(dev)  # [17]
# -- block 4 (one torch.compile'd function on tpu) --
t[18] = F.linear(t[17], t[16])  # [18]
# -- block 5 (one torch.compile'd function on tpu) --
t[19] = F.relu(t[18])  # [19]
(t[19] * _w(t[19])).sum().backward()  # [20]
opt.step()  # adam over the parameters  # [21]
for p in params: p.grad = None  # [22]
# -- block 6 (one torch.compile'd function on tpu) --
t[20] = F.linear(t[17], t[16])  # [23]
t[21] = F.relu(t[20])  # [24]
(t[21] * _w(t[21])).sum().backward()  # [25]
opt.step()  # adam over the parameters  # [26]
# -- block 7 (one torch.compile'd function on tpu) --
t[22] = F.linear(t[17], t[16])  # [27]
t[23] = F.relu(t[22])  # [28]
(t[23] * _w(t[23])).sum().backward()  # [29]
opt.step()  # adam over the parameters  # [30]
for p in params: p.grad = None  # [31]
t[24] = torch.randn([5, 8, 7], generator=torch.Generator().manual_seed(565941356), dtype=torch.float64).float().to(dev)  # [32]
t[25] = torch.randn([512, 128], generator=torch.Generator().manual_seed(611393967), dtype=torch.float64).float().to(dev)  # [33]
t[26] = torch.randn([1, 3], generator=torch.Generator().manual_seed(1065820882), dtype=torch.float64).float().to(dev)  # [34]
t[27] = torch.randn([512, 128], generator=torch.Generator().manual_seed(720154555), dtype=torch.float64).float().to(dev)  # [35]
# -- block 8 (one torch.compile'd function on tpu) --
torch._foreach_mul_([t[14], t[18], t[6], t[23]], 0.75)  # [36]
t[28] = t[20].norm(p=1, dim=1)  # [37]
t[29] = t[28].pow(3)  # [38]
t[30] = torch.randn([512, 128], generator=torch.Generator().manual_seed(807226742), dtype=torch.float64).float().to(dev)  # [39]
t[31] = torch.randn([8], generator=torch.Generator().manual_seed(406270643), dtype=torch.float64).float().to(dev)  # [40]
# -- block 9 (one torch.compile'd function on tpu) --
t[32], t[33], = torch._foreach_norm([t[20], t[11]])  # [41]
# upstream at instruction 36: compiled on tpu: RuntimeError('The size of tensor a (128) must match the size of tensor b (7) at non-singleton dimension 2')
