# torchtpu.fuzz program: seed 9702, mode compiled
t[8] = torch.randn([128, 384], generator=torch.Generator().manual_seed(618635669), dtype=torch.float64).float().to(dev)  # [0]
t[22] = torch.randn([1], generator=torch.Generator().manual_seed(791514509), dtype=torch.float64).float().to(dev)  # [1]
# -- block 6 (one torch.compile'd function on tpu) --
t[23] = torch.cat([t[8], t[8] * t[22]], 0)  # [2]
t[25] = t[23].contiguous()  # [3]
# -- block 9 (one torch.compile'd function on tpu) --
t[34] = t[23].fill_(3)  # [4]
# mismatch at instruction 4: t25: max difference 7.79 at [179, 141]: -4.785604 on tpu, 3 on the CPU, 3 in float64
