# torchtpu.fuzz program: seed 9744, mode compiled
t[2] = torch.randn([2, 3, 3, 2], generator=torch.Generator().manual_seed(126488594), dtype=torch.float64).float().to(dev)  # [0]
# -- block 1 (one torch.compile'd function on tpu) --
t[6] = t[2].permute([2, 0, 1, 3])  # [1]
t[7] = t[2].norm(p=1, dim=2)  # [2]
t[8] = torch.randn([3, 1], generator=torch.Generator().manual_seed(897997338), dtype=torch.float64).float().to(dev)  # [3]
# -- block 2 (one torch.compile'd function on tpu) --
t[11] = t[6].reshape([2, 3, 2, 3])  # [4]
t[12] = t[11].unfold(1, 1, 1)  # [5]
t[13] = torch.randn([2, 3, 2], generator=torch.Generator().manual_seed(990598575), dtype=torch.float64).float().to(dev)  # [6]
t[14] = torch.randn([2, 3, 2, 3, 1], generator=torch.Generator().manual_seed(779969193), dtype=torch.float64).float().to(dev)  # [7]
t[15] = torch.randn([3, 2, 3, 2], generator=torch.Generator().manual_seed(280917410), dtype=torch.float64).float().to(dev)  # [8]
t[16] = torch.randn([3, 1], generator=torch.Generator().manual_seed(1055776933), dtype=torch.float64).float().to(dev)  # [9]
# -- block 3 (one torch.compile'd function on tpu) --
torch._foreach_mul_([t[7], t[12], t[6], t[8]], 0.75)  # [10]
# mismatch at instruction 10: t11: max difference 0.752 at [1, 1, 1, 0]: -3.0084169 on tpu, -2.2563126 on the CPU, -2.2563127 in float64
