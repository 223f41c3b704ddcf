"""Pending storages named by the Python line that initialised them: real
Python programs on an active rank that never receive rank 0's data, checked
through their pending lines on stderr and their JSON reports. The frames are
read from CPython's structures without the GIL (torch released it), so these
run on every Python of the suite: 3.11 (Debian 12, the pip venv), 3.13
(trixie) and 3.14 (sid)."""
import json
import re
import sys
import textwrap

import pytest

from harness import PYTHON, module_or_skip, run

pytestmark = [pytest.mark.every_cpython, pytest.mark.sanitized]

# Line numbers below are the lines of these programs (1-based).
DIRECT = textwrap.dedent("""\
    import torch, torch.nn as nn
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.empty(64, 32))
        def _init_weights(self):
            self.weight.data.normal_(mean=0.0, std=0.02)
    def build():
        model = Model()
        model._init_weights()
        return model
    kept = build()
    """)

THROUGH_NN_INIT = textwrap.dedent("""\
    import torch, torch.nn as nn
    def init_all(p):
        nn.init.normal_(p, std=0.02)
    kept = nn.Parameter(torch.empty(32, 32))
    init_all(kept)
    """)

THREADED = textwrap.dedent("""\
    import threading, torch, torch.nn as nn
    kept = []
    def worker():
        p = nn.Parameter(torch.empty(32, 32))
        p.data.uniform_()
        kept.append(p)
    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    """)

# Names CPython keeps in its other compact forms: Latin-1 (one byte a
# character), UCS-2 and UCS-4 (U+20000, a CJK ideograph beyond the BMP).
NON_ASCII = textwrap.dedent("""\
    import torch, torch.nn as nn
    def initialisé():
        p = nn.Parameter(torch.empty(32, 32))
        p.data.zero_()
        p.data.fill_(1.0)
        return p
    def 初始化():
        return initialisé()
    def 𠀀():
        return 初始化()
    kept = 𠀀()
    """)


def pending_run(tmp_path, name, program, **variables):
    """Runs `program` as tmp_path/name on an active local rank 1 with a
    report; returns (its path, its pending lines, the report)."""
    script = tmp_path / name
    script.write_text(program, encoding="utf-8")
    report = tmp_path / "report.json"
    done = run([PYTHON, str(script)], LOCAL_RANK=1, FSDPSKIP="on", FSDPSKIP_REPORT=str(report), **variables)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("fsdpskip: error: pending storage")]
    with open(str(report), encoding="utf-8") as f:
        return str(script), lines, json.load(f), done


def python_frames(stack):
    return [frame for frame in stack if re.search(r":-?\d+ in ", frame)]


@pytest.mark.emulated
def test_the_pending_line_and_report_name_the_python_line_that_initialised_it(tmp_path):
    path, lines, report, _ = pending_run(tmp_path, "modeling_demo.py", DIRECT)
    assert len(lines) == 1 and "64x32 Float on cpu" in lines[0], lines
    # Innermost first, the file's base name on stderr.
    assert "skipped at modeling_demo.py:7 in _init_weights < modeling_demo.py:10 in build < " \
           "modeling_demo.py:12 in <module> < " in lines[0], lines[0]
    [pending] = report["pending"]
    # The report has whole paths, then the native frames (torch's).
    assert pending["stack"][:3] == ["%s:7 in _init_weights" % path, "%s:10 in build" % path,
                                    "%s:12 in <module>" % path], pending["stack"]
    native = pending["stack"][3:]
    assert native and any("libtorch" in frame or "libc10" in frame for frame in native), native


def test_the_pending_line_starts_at_the_caller_of_torch_and_the_report_keeps_torchs_frames(tmp_path):
    path, lines, report, _ = pending_run(tmp_path, "init_all.py", THROUGH_NN_INIT)
    assert "skipped at init_all.py:3 in init_all < init_all.py:5 in <module> < " in lines[0], lines
    frames = python_frames(report["pending"][0]["stack"])
    assert "torch/nn/init.py" in frames[0] and frames[-2:] == ["%s:3 in init_all" % path, "%s:5 in <module>" % path], \
        frames


def test_a_thread_is_named_by_its_own_frames(tmp_path):
    path, lines, report, _ = pending_run(tmp_path, "threaded.py", THREADED)
    [pending] = report["pending"]
    frames = python_frames(pending["stack"])
    assert frames[0] == "%s:5 in worker" % path, frames
    assert all(path not in frame for frame in frames[1:]), "the main thread's frames are not this thread's"
    assert any(frame.endswith(" in run") and "threading.py" in frame for frame in frames[1:]), frames
    assert "skipped at threaded.py:5 in worker < threading.py:" in lines[0], lines


def test_names_in_every_compact_form_read_as_utf8(tmp_path):
    path, lines, report, _ = pending_run(tmp_path, "modèle_初_🔥.py", NON_ASCII)
    [pending] = report["pending"]
    assert python_frames(pending["stack"])[:4] == ["%s:4 in initialisé" % path, "%s:8 in 初始化" % path,
                                                   "%s:10 in 𠀀" % path, "%s:11 in <module>" % path], pending["stack"]
    assert "skipped at modèle_初_🔥.py:4 in initialisé < modèle_初_🔥.py:8 in 初始化 < modèle_初_🔥.py:10 in 𠀀" \
        in lines[0], lines


TRANSFORMERS_MODEL = textwrap.dedent("""\
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4)
    model = LlamaForCausalLM(config)
    """)


def test_a_never_synced_transformers_model_names_its_modeling_lines(tmp_path):
    """Where transformers is installed (sid, the pip venv): the 12 innermost
    frames, from the modeling code's lines to the program's own where the
    chain is short enough."""
    module_or_skip("transformers")
    path, lines, report, _ = pending_run(tmp_path, "build_llama.py", TRANSFORMERS_MODEL)
    assert report["pending_count"] == len(report["pending"]) > 0
    stacks = [python_frames(pending["stack"]) for pending in report["pending"]]
    # Each storage is named by transformers' code: a module's __init__
    # (torch's reset_parameters under it), where each is first skipped
    # (the norms' weights, under a page, are not skipped).
    assert all(any("/transformers/" in frame for frame in frames) for frames in stacks), stacks
    assert any(frames[-1] == "%s:4 in <module>" % path for frames in stacks), stacks
    assert any("skipped at modeling_llama.py:" in line for line in lines), lines


@pytest.mark.parametrize("stacks", ["native", "off"])
def test_fsdpskip_stacks_leaves_out_the_python_frames_or_every_frame(tmp_path, stacks):
    _, lines, report, _ = pending_run(tmp_path, "modeling_demo.py", DIRECT, FSDPSKIP_STACKS=stacks)
    [pending] = report["pending"]
    assert python_frames(pending["stack"]) == [] and "modeling_demo.py" not in lines[0], lines
    if stacks == "native":
        assert pending["stack"] and "skipped at lib" in lines[0], lines
    else:
        assert pending["stack"] == [] and lines[0].endswith("never received rank 0's data"), lines


def test_the_debug_log_names_the_cpython_found(tmp_path):
    _, _, _, done = pending_run(tmp_path, "modeling_demo.py", DIRECT, FSDPSKIP_LOG="debug")
    expected = "fsdpskip: Python frames: CPython %d.%d.%d" % sys.version_info[:3]
    assert expected in done.stderr.splitlines(), done.stderr
