"""verl (Ray, FSDP trainer, SGLang rollout) driven by a policy, with the same numerics as the builtin backend.

- `launch.build_command(policy, recipe, overrides, *, dry_run) -> VerlLaunch` and `launch.run(launch)`: the
  `precision run --backend verl` command (verl's `main_ppo` with the policy's overrides, the recipe's data and
  reward); `translate.translate(policy, plan)`: the overrides alone, and the refusals.
- `engine.PrecisionFSDPEngine`: verl's FSDP engine with the training rewrites and exact-byte FP8 weight sync,
  registered by the `verl.plugins` entry point (`plugin`); `weight_sync.rollout_tensors`: that sync's tensors.
- `reward.compute_score`: the math reward as verl's `custom_reward_function`.
Importing this package does not import verl; only `engine` and `plugin` do.
"""
