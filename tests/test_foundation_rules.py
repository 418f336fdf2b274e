"""Behaviour of DL501, DL502, DL107 and DL109 that the fixtures do not pin down: what a
message says, which evidence a device value needs, and recall on the re-created bugs."""

from __future__ import annotations

import textwrap

import pytest
from recreated_bugs import REALBUGS, assert_pair, needs_realbugs

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import find_rule


def findings(code: str, source: str, path: str = "pkg/module.py") -> list[tuple[int, str]]:
    options = EngineOptions(rules=(find_rule(code),))
    result = lint_source(textwrap.dedent(source), path, options)
    return [(f.line, f.message) for f in result.findings if f.code == code]


# ---------------------------------------------------------------------------- DL502


def test_annotated_device_compared_with_cpu_is_always_false() -> None:
    found = findings(
        "DL502",
        """
        import torch

        def pick(device: torch.device):
            return torch.float32 if device == "cpu" else torch.float16
    """,
    )
    assert [line for line, _ in found] == [5]
    assert "is always False" in found[0][1] and "annotated `torch.device`" in found[0][1]


def test_parameter_compared_with_cuda_names_the_indexed_caller() -> None:
    found = findings(
        "DL502",
        """
        def fused(device):
            return device == "cuda"

        def main(rank):
            return fused(f"cuda:{rank}")
    """,
    )
    assert len(found) == 1
    assert "False for any indexed device" in found[0][1] and "`main` passes an indexed device" in found[0][1]


def test_parameter_compared_with_cpu_needs_evidence_of_a_device_object() -> None:
    silent = findings(
        "DL502",
        """
        def pick(device):
            return device == "cpu"
    """,
    )
    assert silent == []
    reported = findings(
        "DL502",
        """
        import torch

        def pick(device):
            return device == "cpu"

        def run():
            return pick(torch.device("cpu"))
    """,
    )
    assert len(reported) == 1 and "`run` passes a `torch.device`" in reported[0][1]


def test_latest_dominating_assignment_decides() -> None:
    # The parameter is rebound to a torch.device before the comparison.
    found = findings(
        "DL502",
        """
        import torch

        def check(x, target="cpu"):
            target = torch.device(target)
            return str(x.device) == target
    """,
    )
    assert len(found) == 1 and "a string never equals a `torch.device`" in found[0][1]
    # Rebound to a string: nothing to report.
    assert (
        findings(
            "DL502",
            """
        def check(x, target):
            target = str(target)
            return str(x.device) == target
    """,
        )
        == []
    )


def test_config_fields_are_strings_unless_the_file_reads_their_type() -> None:
    assert (
        findings(
            "DL502",
            """
        def use_amp(args):
            return args.device == "cuda"
    """,
        )
        == []
    )
    found = findings(
        "DL502",
        """
        def use_amp(args):
            if args.device.type == "mps":
                return False
            return args.device == "cuda"
    """,
    )
    assert [line for line, _ in found] == [5]


def test_device_type_and_type_names_are_not_devices() -> None:
    assert (
        findings(
            "DL502",
            """
        import torch

        def f(x, device_type, device: torch.device):
            return x.device.type == "cuda" or device_type == "cuda" or device.type == "cpu"
    """,
        )
        == []
    )


def test_module_constant_built_from_cuda() -> None:
    found = findings(
        "DL502",
        """
        import torch

        DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")

        def needs_move(t):
            return t.device != DEVICE
    """,
    )
    assert len(found) == 1 and "always True on a GPU" in found[0][1] and "t.device.type != DEVICE.type" in found[0][1]


# ---------------------------------------------------------------------------- DL501


@pytest.mark.parametrize(
    "body",
    [
        "scaler.load_state_dict(torch.load(path))",
        "lr_scheduler.load_state_dict(torch.load(path, weights_only=True))",
        "state = torch.load(path)\n    torch.set_rng_state(state['cpu'])\n    random.setstate(state['python'])",
        "return torch.from_numpy(torch.load(path))",
    ],
)
def test_host_only_consumers_are_quiet(body: str) -> None:
    source = f"import random\nimport torch\n\n\ndef f(path, scaler, lr_scheduler):\n    {body}\n"
    assert findings("DL501", source) == []


def test_a_name_used_for_a_model_too_is_reported() -> None:
    found = findings(
        "DL501",
        """
        import torch

        def resume(model, scaler, path):
            state = torch.load(path)
            scaler.load_state_dict(state["scaler"])
            model.load_state_dict(state["model"])
    """,
    )
    assert len(found) == 1


def test_weights_only_does_not_silence() -> None:
    assert len(findings("DL501", "import torch\nstate = torch.load('ckpt.pt', weights_only=True)\n")) == 1


def test_saved_from_gpu_state_is_reported_and_from_cpu_state_is_not() -> None:
    template = """
        import torch

        def save(model):
            torch.save({value}, "weights.pt")

        def load(model):
            model.load_state_dict(torch.load("weights.pt"))
    """
    assert len(findings("DL501", template.format(value="model.state_dict()"))) == 1
    cpu = "{k: v.cpu() for k, v in model.state_dict().items()}"
    assert findings("DL501", template.format(value=cpu)) == []


# ---------------------------------------------------------------------------- DL107


def test_optimizer_state_init_with_cuda() -> None:
    found = findings(
        "DL107",
        """
        import torch

        class Sophia(torch.optim.Optimizer):
            def step(self):
                for group in self.param_groups:
                    for weight in group["params"]:
                        self.state[weight]["hessian"] = torch.zeros(weight.shape, device="cuda")
    """,
    )
    assert len(found) == 1 and "`weight.device`" in found[0][1]


def test_device_capability_query_is_not_placement() -> None:
    assert (
        findings(
            "DL107",
            """
        import torch
        import torch.nn as nn

        class Block(nn.Module):
            def supports_bf16(self):
                props = torch.cuda.get_device_properties(torch.device("cuda"))
                return props.major >= 8
    """,
        )
        == []
    )


def test_plain_class_in_a_script_is_still_exempt() -> None:
    assert (
        findings(
            "DL107",
            """
        import torch
        import torch.nn as nn

        class Net(nn.Module):
            def forward(self, x):
                return x + torch.ones(1).cuda()

        if __name__ == "__main__":
            Net()(torch.ones(1).cuda())
    """,
        )
        == []
    )


# ---------------------------------------------------------------------------- re-created bugs

STEMS = {
    "DL501": ["h01_cutie_load_cpu_only", "h02_checkpoint_helper_no_map_location"],
    "DL502": [
        "h03_device_vs_cpu_string",
        "h04_fused_adamw_cuda_string",
        "h05_sbi_device_str_vs_object",
        "h06_test_device_eq_cuda",
    ],
    "DL107": ["i09_optimizer_hardcoded_cuda"],
    "DL109": ["i08_dataset_getitem_cuda"],
}


@needs_realbugs
@pytest.mark.parametrize("code,stem", [(c, s) for c, stems in STEMS.items() for s in stems])
def test_recreated_bug_pairs(code: str, stem: str) -> None:
    assert_pair(code, stem)


@needs_realbugs
def test_clean_files_stay_silent_for_these_rules() -> None:
    options = EngineOptions(rules=tuple(find_rule(c) for c in STEMS))
    noisy = [
        (path.name, f.line, f.code)
        for path in sorted(REALBUGS.glob("clean_*.py")) + sorted(REALBUGS.glob("*_good.py"))
        for f in lint_source(path.read_bytes(), str(path), options).findings
    ]
    assert noisy == []


# ---------------------------------------------------------------------------- DL501 in tests

RELOAD_AFTER_HANDLER = """
import torch

def check_resume(handler, model, path):
    handler.save(model, path)
    state = torch.load(path)
    model.load_state_dict(state)
"""


@pytest.mark.parametrize(
    "path", ["tests/handlers/test_resume.py", "pkg/resume_test.py", "tests/helpers.py", "conftest.py"]
)
def test_a_test_module_reloads_what_it_wrote_on_its_own_machine(path: str) -> None:
    assert findings("DL501", RELOAD_AFTER_HANDLER, path=path) == []


def test_the_same_reload_in_library_code_is_reported() -> None:
    assert [line for line, _ in findings("DL501", RELOAD_AFTER_HANDLER, path="pkg/resume.py")] == [6]


# ---------------------------------------------------------------------------- DL502 parameters

RUN_ON = """
import torch

def run_on(device, n):
    if device == "cuda":
        torch.cuda.synchronize()
    return torch.zeros(n, device=device)

def main():
    run_on("cuda", 4)
    run_on("cpu", 2)
"""


def test_a_device_parameter_every_caller_passes_a_plain_string_holds_those_strings() -> None:
    assert findings("DL502", RUN_ON) == []


def test_one_caller_passing_something_unresolved_keeps_the_parameter_open() -> None:
    source = RUN_ON + "\n\ndef other(args):\n    run_on(args.device, 1)\n"
    assert [line for line, _ in findings("DL502", source)] == [5]


FIXTURE_PARAMETER = """
import torch

def test_tolerance(available_device):
    tol = 1e-4 if available_device == "mps" else 1e-6
    x = torch.ones(2, device=available_device)
    assert x.sum().item() - 2 < tol
"""


def test_a_test_functions_parameters_are_fixtures_and_are_not_judged() -> None:
    assert findings("DL502", FIXTURE_PARAMETER, path="tests/metrics/test_tolerance.py") == []
    assert [line for line, _ in findings("DL502", FIXTURE_PARAMETER, path="pkg/tolerance.py")] == [5]


LOAD_OR_BUILD = """
import os
import torch

def calibration_set(tokenizer, texts, cache_file):
    if os.path.exists(cache_file):
        samples = torch.load(cache_file)
        return samples
    samples = [tokenizer(t, return_tensors="pt") for t in texts]
    torch.save(samples, cache_file)
    return samples


def resume(model, path):
    if os.path.isfile(path):
        state = torch.load(path)
        model.load_state_dict(state["model"])
    torch.save({"model": model.state_dict()}, path)
"""


def test_a_load_or_build_cache_saves_what_it_loads_a_resume_does_not() -> None:
    # The cache writes back the value it loads into; the resume writes another run's state.
    assert [line for line, _ in findings("DL501", LOAD_OR_BUILD)] == [16]


RANK_LOSS = """
import torch


class RankSort(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets, delta=0.5, eps=1e-10):
        grads = torch.zeros(logits.shape).cuda()
        return (grads + logits * delta + eps).sum()
"""


def test_dl107_names_an_input_without_a_default_not_a_number_parameter() -> None:
    # `eps=1e-10` is a float; the inputs come first and have no default.
    (line, message), *_ = findings("DL107", RANK_LOSS)
    assert line == 8
    assert message.endswith("use the input's device (`logits.device`)")


def test_a_vocabulary_is_host_data() -> None:
    source = """
    import torch

    def build(config):
        answer_vocab = torch.load(config.answer_vocab_file)
        weights = torch.load(config.weights_file)
        return answer_vocab, weights
    """
    assert [line for line, _ in findings("DL501", source)] == [6]
