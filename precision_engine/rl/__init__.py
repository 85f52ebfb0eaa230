"""The built-in RL backend: a rollout engine whose logprobs are the trainer's, a GRPO trainer with the policy's
numerics and importance-sampling correction, the math recipe, and run directories you can resume.

Modules, one concern each: `engine` (batched generation over a preallocated KV cache), `decode` (its CUDA-graph
decode step), `kv_cache`, `sampling`, `logprobs` (the trainer's teacher-forced logprobs), `correction` (TIS/MIS),
`mismatch` (rollout vs training metrics), `onpolicy` (`precision check`'s engine-vs-trainer row), `losses`
(GRPO), `warmup` (the recipe model's supervised start), `evaluate` (greedy held-out accuracy), `trainer` (one
GRPO step), `run` (a whole run: data order, evaluation, checkpoints, resume, ablation), `recipes/`, `runs/`.
"""
