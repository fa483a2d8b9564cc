"""hlcore's Helion kernels in a process where torch.distributed is initialized (as in every vLLM
worker): Helion 1.5.0 on torch 2.11 would compile them as symmetric-memory kernels (a warning, and
on the CPU an AssertionError); hlcore.helion_compat.local_kernel keeps them ordinary."""

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import os, warnings
    import torch, torch.distributed as dist
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = os.environ["HL_TEST_PORT"]
    dist.init_process_group("gloo", rank=0, world_size=1)
    from hlcore import scaled_mm as sm
    from hlcore.activation import silu_and_mul, silu_and_mul_ref
    from hlcore.testing import rel_error, tolerance
    d = sm.generate_scaled_mm_inputs(3, 64, 256, seed=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = sm.scaled_mm(**d)
        x = torch.randn(3, 128, dtype=torch.bfloat16)
        act = silu_and_mul(x)
    assert rel_error(out, sm.scaled_mm_ref(**d)) <= tolerance("fp8_dynamic", torch.bfloat16)
    assert rel_error(act, silu_and_mul_ref(x)) <= 1e-2
    names = [type(w.message).__name__ + str(w.message) for w in caught]
    assert not any("ProcessGroupName" in n or "max_num_sm_multipler" in n for n in names), names
    print("LOCAL-KERNELS-OK")
    """
)


def test_kernels_stay_local_with_torch_distributed_initialized():
    env = {**os.environ, "TRITON_INTERPRET": "1", "HL_TEST_PORT": str(29500 + os.getpid() % 1000)}
    env.pop("HELION_INTERPRET", None)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    assert "LOCAL-KERNELS-OK" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-4000:]


def test_tma_configs_compile_and_match_reference(monkeypatch):
    """indexing="tensor_descriptor" (TMA) with the symbolic split-K chunk: Helion 1.5.0 raised
    NoCurrentFunction while binding (every TMA config failed on the H200). The CPU has no TMA, so
    Helion's support check is forced on; Triton's interpreter runs the descriptor loads."""
    import pytest
    import torch

    if os.environ.get("HELION_INTERPRET") == "1" or torch.cuda.is_available():
        pytest.skip("Triton-interpreter check (the GPU runs TMA for real in the sweep)")
    import helion._compat

    from hlcore import scaled_mm as sm
    from hlcore.testing import rel_error, tolerance

    monkeypatch.setattr(helion._compat, "_supports_tensor_descriptor", lambda: True)
    for fmt, split_k in (("fp8_dynamic", 1), ("block_fp8", 4)):
        cfg = {"block_sizes": [16, 64, 128], "split_k": split_k, "swap_ab": True, "num_warps": 4}
        cfg.update(num_stages=2, indexing="tensor_descriptor")
        out_dtype = torch.float16 if split_k > 1 else torch.bfloat16  # the interpreter has no bf16 atomics
        d = sm.generate_scaled_mm_inputs(8, 128, 512, fmt=fmt, out_dtype=out_dtype, seed=2)
        kernel = sm._kernel_for(sm.config_json(cfg, "scaled_mm"))
        args = sm.kernel_args(d["a"], d["b"], d["scale_a"], d["scale_b"], None, out_dtype, d["block_size"])
        code = kernel.bind(args).to_triton_code(kernel.configs[0])
        assert "make_tensor_descriptor" in code
        out = kernel(*args)
        assert rel_error(out, sm.scaled_mm_ref(**d)) <= tolerance(fmt, out_dtype)
