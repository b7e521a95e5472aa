# torchtpu.fuzz program: seed 9740, mode compiled
t[0] = torch.randn([1], generator=torch.Generator().manual_seed(197000034), dtype=torch.float64).float().to(dev).requires_grad_()  # a parameter  # [0]
t[1] = torch.randn([8, 7, 16], generator=torch.Generator().manual_seed(744821025), dtype=torch.float64).float().to(dev)  # [1]
# -- block 1 (one torch.compile'd function on tpu) --
t[2] = torch.sign(t[1])  # [2]
# -- block 2 (one torch.compile'd function on tpu) --
torch.clamp(t[1], 0, out=t[2])  # [3]
t[3] = torch.sign(t[1])  # [4]
torch.clamp(t[1], 0, out=t[3])  # [5]
t[4] = t[0].mean(0, keepdim=True)  # [6]
t[5] = t[1].amin(0)  # [7]
t[6] = torch.randn([7, 16], generator=torch.Generator().manual_seed(452311988), dtype=torch.float64).float().to(dev)  # [8]
t[7] = torch.randn([8, 7, 16], generator=torch.Generator().manual_seed(358865611), dtype=torch.float64).float().to(dev)  # [9]
t[8] = torch.randn([8, 7, 16], generator=torch.Generator().manual_seed(629166101), dtype=torch.float64).float().to(dev)  # [10]
t[9] = torch.randn([1], generator=torch.Generator().manual_seed(490067481), dtype=torch.float64).float().to(dev)  # [11]
t[10] = torch.randn([8, 7, 16], generator=torch.Generator().manual_seed(850270559), dtype=torch.float64).float().to(dev)  # [12]
# -- block 3 (one torch.compile'd function on tpu) --
t[11], t[12], t[13], t[14], t[15], = torch._foreach_sqrt([x.abs() for x in [t[5], t[2], t[1], t[4], t[3]]])  # [13]
t[9].bernoulli_(0.3, generator=torch.Generator(dev).manual_seed(491530002))  # the CPU takes tpu's values  # [14]
t[16] = torch.randn([1], generator=torch.Generator().manual_seed(69391226), dtype=torch.float64).float().to(dev)  # [15]
t[17] = torch.randn([8, 7, 16], generator=torch.Generator().manual_seed(399021141), dtype=torch.float64).float().to(dev)  # [16]
# -- block 4 (one torch.compile'd function on tpu) --
t[18], t[19], t[20], t[21], t[22], = torch._foreach_sqrt([x.abs() for x in [t[5], t[2], t[1], t[4], t[3]]])  # [17]
t[16].bernoulli_(0.3, generator=torch.Generator(dev).manual_seed(491530002))  # the CPU takes tpu's values  # [18]
# -- block 5 (one torch.compile'd function on tpu) --
(t[4] * _w(t[4])).sum().backward()  # [19]
t[23] = torch.randn([8, 7, 16], generator=torch.Generator().manual_seed(827458837), dtype=torch.float64).float().to(dev)  # [20]
# -- block 6 (one torch.compile'd function on tpu) --
t[24], t[25], t[26], t[27], t[28], = torch._foreach_sqrt([x.abs() for x in [t[5], t[2], t[1], t[4], t[3]]])  # [21]
t[16].bernoulli_(0.3, generator=torch.Generator(dev).manual_seed(491530002))  # the CPU takes tpu's values  # [22]
# -- block 7 (one torch.compile'd function on tpu) --
(t[4] * _w(t[4])).sum().backward()  # [23]
# -- block 8 (one torch.compile'd function on tpu) --
t[29] = t[16] + 2.5 * t[9]  # [24]
t[30] = t[21].reshape([1])  # [25]
t[31] = t[0].to(torch.int64)  # [26]
t[32] = t[16] + 2.5 * t[9]  # [27]
t[33] = t[21].reshape([1])  # [28]
# -- block 9 (one torch.compile'd function on tpu) --
t[34] = t[0].to(torch.int64)  # [29]
t[35] = t[18].pow(3)  # [30]
t[36] = torch.erf(t[27])  # [31]
t[37] = t[21].reshape([1])  # [32]
# -- block 10 (one torch.compile'd function on tpu) --
t[38] = t[0].to(torch.int64)  # [33]
t[39] = t[18].pow(3)  # [34]
t[40] = torch.erf(t[27])  # [35]
(t[37] * _w(t[37])).sum().backward()  # [36]
t[41] = torch.randn([7, 3], generator=torch.Generator().manual_seed(82066908), dtype=torch.float64).float().to(dev)  # [37]
# -- block 11 (one torch.compile'd function on tpu) --
t[42] = torch.maximum(t[12], t[23])  # [38]
t[43] = torch.sqrt(t[20].abs())  # [39]
# upstream at instruction 23: compiled on tpu: RuntimeError('Trying to backward through the graph a second time (or directly access saved tensors after they have already been freed). Saved intermediate values of the graph are freed when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second time or if you need to access saved tensors after calling backward.')
