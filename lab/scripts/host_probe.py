"""Why is the plugin's engine slower on the host when its graphs call the same kernels?

Issue 20: an 8-layer W8A8_INT8 engine with the plugin ran the same prefill kernels as without it
(the compile range above max_helion_size is lowered to vLLM's ops) but every host op took ~1.5x as
long (torch profiler, lab/results/2026-12-01-night/P). This starts the engine in this process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``), plugin ``on`` or ``off``, then reports: the process's
threads and the CPU each burns while the engine is idle (3 s), what the non-main threads run, the
Python trace/profile hooks and torch mode stacks, the host time of a plain CUDA op loop, and the
time of 20 one-token generates of one 128-token prompt.

Usage (GPU machine): ``python3 lab/scripts/host_probe.py on|off [layers]``; prints one JSON line.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path


def _task_cpu() -> dict[str, float]:
    out = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            stat = (task / "stat").read_text()
            comm = (task / "comm").read_text().strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[f"{task.name}:{comm}"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def main() -> None:
    plugin = sys.argv[1]
    layers = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if plugin == "on":
        os.environ["HL_LINEAR_BACKEND"] = "helion"
    else:
        os.environ["VLLM_PLUGINS"] = ""
    from hltools.e2e import engine_model_config
    from hltools.shapes import load_model_config

    cfg = engine_model_config(load_model_config("qwen3-8b"), "w8a8_int8", layers)
    model_dir = Path(tempfile.mkdtemp(prefix=f"probe-{plugin}-"))
    (model_dir / "config.json").write_text(json.dumps(cfg))
    import torch
    from vllm import LLM, SamplingParams

    llm = LLM(
        model=str(model_dir), load_format="dummy", skip_tokenizer_init=True, dtype="bfloat16",
        max_model_len=512, max_num_seqs=8, enable_prefix_caching=False, gpu_memory_utilization=0.4,
    )  # fmt: skip
    before = _task_cpu()
    time.sleep(3.0)
    after = _task_cpu()
    busy = {k: round(after[k] - before.get(k, 0.0), 3) for k in after if after[k] - before.get(k, 0.0) > 0.01}
    frames = sys._current_frames()
    others = {
        t.name: [f"{f.f_code.co_filename.split('site-packages/')[-1]}:{f.f_lineno} {f.f_code.co_name}"]
        for t in threading.enumerate()
        if t is not threading.main_thread() and (f := frames.get(t.ident)) is not None
    }
    x = torch.zeros(8, device="cuda")
    t0 = time.perf_counter()
    for _ in range(20000):
        x.add_(1)
    torch.cuda.synchronize()
    op_us = (time.perf_counter() - t0) / 20000 * 1e6
    sp = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True, detokenize=False)
    prompt = [{"prompt_token_ids": list(range(3, 131))}]
    llm.generate(prompt, sp, use_tqdm=False)
    ttft = []
    for _ in range(20):
        t0 = time.perf_counter()
        llm.generate(prompt, sp, use_tqdm=False)
        ttft.append((time.perf_counter() - t0) * 1e3)
    import gc

    print(
        "PROBE "
        + json.dumps(
            {
                "plugin": plugin,
                "layers": layers,
                "threads": len(after),
                "busy_cpu_s_in_3s": busy,
                "other_threads": others,
                "trace": repr(sys.gettrace()),
                "profile": repr(sys.getprofile()),
                "torch_function_stack": torch._C._len_torch_function_stack(),
                "torch_dispatch_stack": torch._C._len_torch_dispatch_stack(),
                "gc_counts": gc.get_count(),
                "gc_frozen": gc.get_freeze_count(),
                "gc_objects": len(gc.get_objects()),
                "cuda_add_us": round(op_us, 2),
                "ttft_ms_median": round(statistics.median(ttft), 2),
                "ttft_ms": [round(v, 2) for v in ttft],
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
