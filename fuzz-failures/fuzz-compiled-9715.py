# torchtpu.fuzz program: seed 9715, mode compiled
t[0] = torch.randn([2, 4], generator=torch.Generator().manual_seed(759203860), dtype=torch.float64).float().to(dev).requires_grad_()  # a parameter  # [0]
t[1] = torch.randn([], generator=torch.Generator().manual_seed(595309333), dtype=torch.float64).float().to(dev)  # [1]
t[2] = torch.randperm(13, generator=torch.Generator(dev).manual_seed(738165424), device=dev)  # the CPU takes tpu's values  # [2]
# -- block 1 (one torch.compile'd function on tpu) --
t[3] = t[2].expand([13])  # [3]
t[4] = torch.sigmoid(t[1])  # [4]
t[5] = t[0].unfold(0, 2, 1)  # [5]
t[6] = torch.randn([1, 4, 1], generator=torch.Generator().manual_seed(711941327), dtype=torch.float64).float().to(dev)  # [6]
# -- block 2 (one torch.compile'd function on tpu) --
t[7] = t[5] * t[6]  # [7]
t[8] = t[7].amin(1)  # [8]
t[9] = t[2].select(0, 9)  # [9]
t[10] = t[5].prod(2)  # [10]
t[11] = torch.randn([1, 4, 1], generator=torch.Generator().manual_seed(354631903), dtype=torch.float64).float().to(dev)  # [11]
# -- block 3 (one torch.compile'd function on tpu) --
t[12] = t[5] * t[11]  # [12]
t[13] = t[12].amin(1)  # [13]
t[14] = t[2].select(0, 9)  # [14]
t[15] = t[5].prod(2)  # [15]
t[16] = torch.randint(0, 1, [3], generator=torch.Generator().manual_seed(508385879)).to(dev)  # [16]
t[17] = torch.randint(0, 1, [1, 2], generator=torch.Generator().manual_seed(1001179481)).to(dev)  # [17]
t[18] = torch.randint(0, 1, [4], generator=torch.Generator().manual_seed(282547479)).to(dev)  # [18]
# -- block 4 (one torch.compile'd function on tpu) --
t[19] = torch.take(t[8], t[16])  # [19]
t[20] = (t[0] > 0).sum()  # [20]
(t[13] * _w(t[13])).sum().backward()  # [21]
t[21] = torch.randint(0, 1, [1], generator=torch.Generator().manual_seed(721117746)).to(dev)  # [22]
t[23] = torch.randn([1, 4], generator=torch.Generator().manual_seed(598341026), dtype=torch.float64).float().to(dev)  # [23]
t[24] = torch.randint(0, 1, [1], generator=torch.Generator().manual_seed(651579616)).to(dev)  # [24]
# -- block 6 (one torch.compile'd function on tpu) --
t[25] = t[15].fill_(-2.0)  # [25]
t[26] = F.pad(t[25], [1, 2])  # [26]
t[27] = t[6].expand([1, 4, 5])  # [27]
# -- block 7 (one torch.compile'd function on tpu) --
(t[10] * _w(t[10])).sum().backward()  # [28]
t[28] = t[26].reshape([7, 1])  # [29]
t[29] = torch.randint(0, 1, [1], generator=torch.Generator().manual_seed(199144277)).to(dev)  # [30]
# -- block 8 (one torch.compile'd function on tpu) --
t[30] = t[23].copy_(t[10])  # [31]
t[31] = torch.randn([1, 4], generator=torch.Generator().manual_seed(508387711), dtype=torch.float64).float().to(dev)  # [32]
t[32] = torch.randint(0, 4, [4], generator=torch.Generator().manual_seed(896866380)).to(dev)  # [33]
# -- block 9 (one torch.compile'd function on tpu) --
t[33] = t[10].exp_().sub_(1)  # [34]
t[34] = torch.randn([256, 768], generator=torch.Generator().manual_seed(813052261), dtype=torch.float64).float().to(dev)  # [35]
t[35] = (torch.randn([768, 512], generator=torch.Generator().manual_seed(685186927), dtype=torch.float64).float() * 0.036084391824351615).transpose(-1, -2).contiguous().transpose(-1, -2).to(dev)  # [36]
t[37] = torch.randn([1, 4, 2], generator=torch.Generator().manual_seed(526850607), dtype=torch.float64).float().to(dev)  # [37]
t[38] = torch.randint(0, 1, [1], generator=torch.Generator().manual_seed(45342471)).to(dev)  # [38]
with torch.no_grad(): t[39] = t[25].tanh_()  # [39]
# upstream at instruction 34: compiled on tpu: BackendCompilerFailed('backend=\'tpu\' raised:\nRuntimeError: one of the variables needed for gradient computation has been modified by an inplace operation: [tpuFloatType [1, 4]], which is output 0 of Exp, is at version 2; expected version 1 instead. Hint: the backtrace further above shows the operation that failed to compute its gradient. The variable in question was changed in there or anywhere later. Good luck!\n\nSet TORCHDYNAMO_VERBOSE=1 for the internal stack trace (please do this especially if you\'re reporting a bug to PyTorch). For even more developer context, set TORCH_LOGS="+dynamo"\n')
