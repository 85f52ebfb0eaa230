"""compile_plan: first-match resolution, FP8 FLOP share, and the train/rollout identity verdict."""

from dataclasses import replace

from compile_policies import JET_SPEC, make_policy, rule

from precision_engine.compile import compile_plan
from precision_engine.models import ModuleKind
from precision_engine.numerics.formats import PRESET_FORMATS, DType, Kernel, LinearSpec
from precision_engine.policy import load_policy
from precision_engine.policy.model import Rule


def fp8_linears(plan, phase):
    return [p for p in plan.phases[phase].modules if p.is_fp8]


def test_llama_8b_unified(unified, llama8b):
    plan = compile_plan(unified, llama8b)
    for phase in ("train", "rollout"):
        assert len(fp8_linears(plan, phase)) == 224
        lm_head = plan.phases[phase].by_name["lm_head"]
        assert not lm_head.is_fp8 and lm_head.compute is DType.BF16 and lm_head.rule == "unified[0]"
        assert plan.phases[phase].by_name["model.layers.7.mlp.up_proj"].linear == JET_SPEC
    assert plan.all_identical and plan.identical("model.layers.0.self_attn.q_proj")
    share = plan.fp8_flop_share("train")
    lm_head_flops = 2 * 128256 * 4096
    assert share == 1 - lm_head_flops / llama8b.gemm_flops_per_token
    assert 0.92 < share < 0.94


def test_naive_differs_in_train_forward_only_for_gemms(naive, llama8b):
    plan = compile_plan(naive, llama8b)
    assert fp8_linears(plan, "train") == [] and len(fp8_linears(plan, "rollout")) == 224
    assert plan.fp8_flop_share("train") == 0.0
    differing = set(plan.differing())
    assert len(differing) == 224 and "lm_head" not in differing
    assert plan.identical("model.norm")


def test_batch_variant_kernels_are_never_identical(batch_variant, llama8b):
    plan = compile_plan(batch_variant, llama8b)
    assert not plan.identical("model.layers.0.self_attn.q_proj")
    assert len(plan.differing()) == len(llama8b.modules)


def test_unmatched_modules_keep_bf16_with_no_rule(tiny_moe):
    only_q = make_policy({"r": (rule("r[0]", "*.q_proj", linear=JET_SPEC),)}, {"train": "r", "rollout": "r"})
    plan = compile_plan(only_q, tiny_moe)
    k_proj = plan.phases["train"].by_name["model.layers.0.self_attn.k_proj"]
    assert k_proj.rule is None and k_proj.compute is DType.BF16 and k_proj.linear is None
    assert [p.module.name for p in fp8_linears(plan, "train")] == [
        "model.layers.0.self_attn.q_proj",
        "model.layers.1.self_attn.q_proj",
    ]


def test_linear_rule_does_not_quantize_norms_or_embeddings(tiny_moe):
    everything = make_policy({"r": (rule("r[0]", "*", linear=JET_SPEC),)}, {"train": "r", "rollout": "r"})
    plan = compile_plan(everything, tiny_moe)
    for mp in plan.phases["train"].modules:
        assert mp.rule == "r[0]"
        assert mp.is_fp8 == mp.module.kind.is_gemm
    assert plan.phases["train"].by_name["model.layers.1.mlp.gate"].linear is None  # the router stays unquantized


def test_types_filter_and_first_match(tiny_moe):
    rules = (
        Rule(("*",), types=("Qwen3MoeRMSNorm",), compute=DType.FP32, label="r[0]"),
        rule("r[1]", "re:.*", linear=JET_SPEC),
    )
    plan = compile_plan(make_policy({"r": rules}, {"train": "r", "rollout": "r"}), tiny_moe)
    norm = plan.phases["rollout"].by_name["model.layers.0.self_attn.q_norm"]
    assert norm.compute is DType.FP32 and norm.rule == "r[0]"
    assert plan.phases["rollout"].by_name["lm_head"].is_fp8


def test_moe_experts_are_planned_fp8(unified, moe30b):
    plan = compile_plan(unified, moe30b)
    train = plan.phases["train"]
    experts = [mp for mp in train.modules if mp.module.kind is ModuleKind.EXPERTS]
    assert len(experts) == 48 and all(mp.is_fp8 and mp.linear == JET_SPEC for mp in experts)
    assert not any(mp.is_fp8 for mp in train.modules if mp.module.kind is ModuleKind.ROUTER)
    gemm_flops = moe30b.gemm_flops_per_token
    assert train.fp8_flop_share() == 1 - moe30b.by_name["lm_head"].flops_per_token / gemm_flops


def test_policy_kernel_fills_rules_without_one_but_an_explicit_auto_stays(tiny_moe):
    plan = compile_plan(load_policy("jetrl_unified", ["kernel=triton"]), tiny_moe)
    assert plan.phases["train"].by_name["lm_head"].linear is None
    assert {mp.linear.kernel for mp in fp8_linears(plan, "train")} == {Kernel.TRITON}
    # a rule's own `kernel: auto` used to be overwritten by the policy's kernel
    plan = compile_plan(load_policy("jetrl_unified", ["kernel=triton", "rules.unified[1].linear.kernel=auto"]),
                        tiny_moe)
    assert {mp.linear.kernel for mp in fp8_linears(plan, "train")} == {Kernel.AUTO}


def test_different_kernel_per_phase_breaks_identity(tiny_moe):
    train = (rule("t[0]", "re:.*_proj", linear=replace(JET_SPEC, kernel=Kernel.CUBLAS)),)
    rollout = (rule("r[0]", "re:.*_proj", linear=replace(JET_SPEC, kernel=Kernel.TRITON)),)
    plan = compile_plan(make_policy({"t": train, "r": rollout}, {"train": "t", "rollout": "r"}), tiny_moe)
    assert not plan.identical("model.layers.0.self_attn.o_proj")
    assert plan.identical("model.norm")  # unmatched in both phases: bf16 both times


def test_rollout_without_backward_formats_is_still_identical_forward(tiny_moe):
    """Train forward = rollout compares forward numerics only: backward formats exist only in training."""
    w8a8 = replace(JET_SPEC, grad_output=None, wgrad_operands=None)
    train = (rule("t[0]", "re:.*_proj", linear=JET_SPEC),)
    rollout = (rule("r[0]", "re:.*_proj", linear=w8a8),)
    plan = compile_plan(make_policy({"t": train, "r": rollout}, {"train": "t", "rollout": "r"}), tiny_moe)
    assert plan.identical("model.layers.1.self_attn.v_proj")


def test_linear_spec_without_fp8_operands_is_a_plain_gemm(tiny_moe):
    bf16 = PRESET_FORMATS["bf16"]
    plain = LinearSpec(weight=bf16, input=bf16, compute=DType.FP32)
    policy = make_policy({"r": (rule("r[0]", "lm_head", linear=plain),)}, {"train": "r", "rollout": "r"})
    plan = compile_plan(policy, tiny_moe)
    lm_head = plan.phases["train"].by_name["lm_head"]
    assert lm_head.linear is None and lm_head.compute is DType.FP32 and lm_head.rule == "r[0]"
