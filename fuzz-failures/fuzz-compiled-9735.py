# torchtpu.fuzz program: seed 9735, mode compiled
t[0] = torch.randn([4, 2], generator=torch.Generator().manual_seed(125376391), dtype=torch.float64).float().to(dev).requires_grad_()  # a parameter  # [0]
t[1] = torch.randn([8, 5, 16], generator=torch.Generator().manual_seed(712563351), dtype=torch.float64).float().to(dev)  # [1]
t[2] = torch.randn([], generator=torch.Generator().manual_seed(776878002), dtype=torch.float64).float().to(dev)  # [2]
t[3] = torch.randint(0, 11, [1], generator=torch.Generator().manual_seed(355444582)).to(dev)  # [3]
t[4] = torch.randint(0, 8, [2], generator=torch.Generator().manual_seed(186638716)).to(dev)  # [4]
# -- block 1 (one torch.compile'd function on tpu) --
t[5] = torch.take(t[1], t[3])  # [5]
t[6] = t[1].expand([2, 8, 5, 16])  # [6]
t[7] = torch.randn([1], generator=torch.Generator().manual_seed(844212695), dtype=torch.float64).float().to(dev)  # [7]
t[8] = torch.randn([8, 5, 16], generator=torch.Generator().manual_seed(387623453), dtype=torch.float64).float().to(dev)  # [8]
# -- block 2 (one torch.compile'd function on tpu) --
torch._foreach_mul_([t[5], t[1]], 0.75)  # [9]
t[9] = torch.randn([1, 8], generator=torch.Generator().manual_seed(909854399), dtype=torch.float64).float().to(dev).requires_grad_()  # a parameter  # [10]
t[10] = torch.randn([1, 8], generator=torch.Generator().manual_seed(1024186877), dtype=torch.float64).float().to(dev)  # [11]
# -- block 4 (one torch.compile'd function on tpu) --
t[11] = t[9].chunk(2, 0)[0]  # [12]
t[12] = torch.randint(0, 4, [8], generator=torch.Generator().manual_seed(148381056)).to(dev)  # [13]
t[13] = torch.randint(0, 4, [4, 2], generator=torch.Generator().manual_seed(573355251)).to(dev)  # [14]
# -- block 5 (one torch.compile'd function on tpu) --
t[14] = t[0].scatter_add(0, t[13], t[0])  # [15]
t[15] = torch.randint(0, 33, [2], generator=torch.Generator().manual_seed(343250442)).to(dev)  # [16]
t[16] = torch.randint(0, 8, [3], generator=torch.Generator().manual_seed(653907817)).to(dev)  # [17]
# -- block 6 (one torch.compile'd function on tpu) --
t[17] = t[8].index_put_((t[16],), t[8][t[16]] * 0.5, accumulate=True)  # [18]
t[18] = torch.randint(0, 5, [1], generator=torch.Generator().manual_seed(190901946)).to(dev)  # [19]
# -- block 7 (one torch.compile'd function on tpu) --
t[19] = t[1].addcmul_(t[8], t[8], value=-0.1)  # [20]
t[20] = t[12].view([1, 8])  # [21]
(t[14] * _w(t[14])).sum().backward()  # [22]
t[21] = t[20].squeeze()  # [23]
t[22] = t[16].expand([2, 3])  # [24]
t[23] = torch.randn([], generator=torch.Generator().manual_seed(292163922), dtype=torch.float64).float().to(dev)  # [25]
# -- block 8 (one torch.compile'd function on tpu) --
t[24] = F.layer_norm(t[19], [16])  # [26]
t[25] = t[19] + 1.5  # [27]
t[26] = torch.randint(0, 2, [2], generator=torch.Generator().manual_seed(666910640)).to(dev)  # [28]
with torch.no_grad(): t[27] = t[0].index_fill_(1, t[26], -1.5)  # [29]
# -- block 9 (one torch.compile'd function on tpu) --
t[28] = torch.where(t[25].abs() >= 0, t[19], t[25])  # [30]
t[29] = torch.randn([8, 5, 16], generator=torch.Generator().manual_seed(704575106), dtype=torch.float64).float().to(dev)  # [31]
# -- block 10 (one torch.compile'd function on tpu) --
torch.add(t[25], t[25], out=t[29])  # [32]
t[30] = torch.randn([64, 384], generator=torch.Generator().manual_seed(874522328), dtype=torch.float64).float().transpose(-1, -2).contiguous().transpose(-1, -2).to(dev)  # [33]
t[31] = (torch.randn([512, 384], generator=torch.Generator().manual_seed(733994187), dtype=torch.float64).float() * 0.051031036307982884).to(dev).requires_grad_()  # a parameter  # [34]
t[32] = torch.randn([512], generator=torch.Generator().manual_seed(409312150), dtype=torch.float64).float().to(dev)  # [35]
# -- block 11 (one torch.compile'd function on tpu) --
t[33] = F.linear(t[30], t[31], t[32])  # [36]
t[34] = torch.randint(0, 8, [6], generator=torch.Generator().manual_seed(899384095)).to(dev)  # [37]
# -- block 12 (one torch.compile'd function on tpu) --
t[35] = t[24].relu_()  # [38]
t[36] = torch.randn([8, 5, 16], generator=torch.Generator().manual_seed(607296134), dtype=torch.float64).float().to(dev)  # [39]
t[37] = torch.randn([1], generator=torch.Generator().manual_seed(515696353), dtype=torch.float64).float().to(dev)  # [40]
t[38] = torch.randn([8, 5, 16], generator=torch.Generator().manual_seed(669042180), dtype=torch.float64).float().to(dev)  # [41]
t[39] = torch.randn([512], generator=torch.Generator().manual_seed(637684423), dtype=torch.float64).float().to(dev)  # [42]
# -- block 13 (one torch.compile'd function on tpu) --
torch._foreach_add_([t[1], t[7], t[19], t[32]], [t[36], t[37], t[38], t[39]], alpha=0.5)  # [43]
# upstream at instruction 43: aot_eager on the CPU differs too: t1: max difference 1.61 at [3, 4, 9]: -0.68707246 on tpu, -2.2939336 on the CPU, -2.2939335 in float64
