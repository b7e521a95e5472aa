# torchtpu.fuzz program: seed 9730, mode compiled
t[0] = torch.randn([7, 5], generator=torch.Generator().manual_seed(79201499), dtype=torch.float64).float().to(dev).requires_grad_()  # a parameter  # [0]
t[1] = torch.randn([8, 5], generator=torch.Generator().manual_seed(408379871), dtype=torch.float64).float().to(dev).requires_grad_()  # a parameter  # [1]
t[2] = torch.randn([2, 31, 2], generator=torch.Generator().manual_seed(174724737), dtype=torch.float64).float().to(dev)  # [2]
t[3] = torch.randn([4], generator=torch.Generator().manual_seed(875220123), dtype=torch.float64).float().to(dev)  # [3]
t[4] = torch.randn([5, 3, 1, 5], generator=torch.Generator().manual_seed(718427795), dtype=torch.float64).float().to(dev)  # [4]
t[5] = torch.randn([8, 5], generator=torch.Generator().manual_seed(742843704), dtype=torch.float64).float().to(dev)  # [5]
# -- block 1 (one torch.compile'd function on tpu) --
t[6] = torch.atan2(t[1], t[5].abs() + 0.5)  # [6]
t[7] = torch.randn([1], generator=torch.Generator().manual_seed(614203819), dtype=torch.float64).float().to(dev)  # [7]
t[8] = torch.randint(0, 4, [1], generator=torch.Generator().manual_seed(938755247)).to(dev)  # [8]
# -- block 2 (one torch.compile'd function on tpu) --
t[9] = t[3].addcmul_(t[7], t[7], value=-0.1)  # [9]
t[10] = (torch.randn([256, 64], generator=torch.Generator().manual_seed(1059213891), dtype=torch.float64).float() * 0.0625).to(dev).requires_grad_()  # a parameter  # [10]
t[11] = torch.randn([16, 256], generator=torch.Generator().manual_seed(111173109), dtype=torch.float64).float().to(dev)  # [11]
# -- block 3 (one torch.compile'd function on tpu) --
t[12] = t[11] @ t[10]  # [12]
t[13] = F.gelu(t[12])  # [13]
(t[13] * _w(t[13])).sum().backward()  # [14]
opt.step()  # adamw_foreach over the parameters  # [15]
for p in params: p.grad = None  # [16]
# -- block 4 (one torch.compile'd function on tpu) --
t[14] = t[11] @ t[10]  # [17]
t[15] = F.gelu(t[14])  # [18]
(t[15] * _w(t[15])).sum().backward()  # [19]
opt.step()  # adamw_foreach over the parameters  # [20]
for p in params: p.grad = None  # [21]
# -- block 5 (one torch.compile'd function on tpu) --
t[16] = t[11] @ t[10]  # [22]
t[17] = F.relu(t[16])  # [23]
(t[17] * _w(t[17])).sum().backward()  # [24]
opt.step()  # adamw_foreach over the parameters  # [25]
for p in params: p.grad = None  # [26]
# -- block 7 (one torch.compile'd function on tpu) --
t[18] = t[11].reshape([256, 16])  # [27]
t[19] = torch.randn([16, 64], generator=torch.Generator().manual_seed(471963439), dtype=torch.float64).float().to(dev)  # [28]
t[20] = torch.randint(0, 64, [5], generator=torch.Generator().manual_seed(1046836770)).to(dev)  # [29]
# -- block 8 (one torch.compile'd function on tpu) --
t[21] = t[12].exp_().sub_(1)  # [30]
t[22] = t[1].flatten(0, 1)  # [31]
t[23] = torch.randn([16, 64], generator=torch.Generator().manual_seed(342821010), dtype=torch.float64).float().to(dev)  # [32]
t[24] = torch.randint(0, 64, [5], generator=torch.Generator().manual_seed(496462278)).to(dev)  # [33]
# -- block 10 (one torch.compile'd function on tpu) --
t[25] = t[12].exp_().sub_(1)  # [34]
t[26] = t[1].flatten(0, 1)  # [35]
t[27] = torch.randn([16, 2], generator=torch.Generator().manual_seed(517987804), dtype=torch.float64).float().to(dev)  # [36]
# -- block 11 (one torch.compile'd function on tpu) --
t[28] = torch.logsumexp(t[19], 1)  # [37]
t[29] = t[10].permute([0, 1])  # [38]
(t[1] * _w(t[1])).sum().backward()  # [39]
# upstream at instruction 30: compiled on tpu: BackendCompilerFailed('backend=\'tpu\' raised:\nRuntimeError: one of the variables needed for gradient computation has been modified by an inplace operation: [tpuFloatType [16, 64]], which is output 0 of Exp, is at version 2; expected version 1 instead. Hint: the backtrace further above shows the operation that failed to compute its gradient. The variable in question was changed in there or anywhere later. Good luck!\n\nSet TORCHDYNAMO_VERBOSE=1 for the internal stack trace (please do this especially if you\'re reporting a bug to PyTorch). For even more developer context, set TORCH_LOGS="+dynamo"\n')
