"""Shapes behind the misses of re-created set rv (session 39), each tested in at least two
spellings other than the pair's, with its one-fix twin clean."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))


def _found(source: str, path: str = "train/loop.py") -> list[tuple[int, str, str]]:
    result = lint_source(textwrap.dedent(source), path, DEFAULT)
    return [(f.line, f.code, f.message) for f in result.findings]


def _branch_message(expr: str) -> str:
    return (
        f"`{expr}` copies a device tensor to the host on every training step to decide a branch, which stalls"
        " the GPU until the step's kernels finish; test it every N steps, or keep the check on the device"
        " (`torch.where`, `torch.nan_to_num`)"
    )


# -- the loss a step helper backpropagates and hands back is a device tensor in its caller ------

STEP_METHOD_RETURNS_LOSS = """
    import torch


    class Runner:
        def __init__(self, net, batches, where="cuda"):
            self.net = net.to(where)
            self.batches = batches
            self.where = where
            self.opt = torch.optim.AdamW(self.net.parameters(), lr=1e-4)

        def one_step(self, feed):
            feed = {k: v.to(self.where) for k, v in feed.items()}
            objective = self.net(**feed).loss
            objective.backward()
            return objective.detach()

        def run(self):
            for feed in self.batches:
                value = self.one_step(feed)
                if torch.isnan(value):
                    self.opt.zero_grad()
                    continue
                self.opt.step()
                self.opt.zero_grad()
"""

STEP_FUNCTION_RETURNS_TUPLE = """
    import torch


    def backprop(model, x, y, crit):
        out = model(x)
        err = crit(out, y)
        err.backward()
        return err, out.shape[0]


    def fit(model, loader, crit, opt, device):
        model.to(device)
        seen = 0
        for x, y in loader:
            err, n = backprop(model, x.to(device), y.to(device), crit)
            opt.step()
            opt.zero_grad()
            seen += n
            print("step loss", err.item())
"""


def test_a_loss_handed_back_by_a_backward_method_is_read_on_the_device() -> None:
    assert _found(STEP_METHOD_RETURNS_LOSS) == [(21, "DL401", _branch_message("if torch.isnan(value):"))]


def test_a_loss_handed_back_in_a_tuple_by_a_backward_function_is_read_on_the_device() -> None:
    found = _found(STEP_FUNCTION_RETURNS_TUPLE)
    assert [(line, code) for line, code, _ in found] == [(20, "DL401")]
    assert found[0][2].startswith("`err.item()` copies a device tensor to the host on every training step to print")


def test_a_helper_that_hands_back_a_host_number_is_clean() -> None:
    assert _found(STEP_METHOD_RETURNS_LOSS.replace("return objective.detach()", "return 0.0")) == []
    # the other element of the tuple (a Python int) is not the loss
    assert _found(STEP_FUNCTION_RETURNS_TUPLE.replace('print("step loss", err.item())', 'print("seen", n)')) == []


# -- each operand of an `and`/`or` test is read as a bool --------------------------------------

FLAGGED_NAN_TEST = """
    import torch


    def train(model, loader, opt, device, skip_bad=True):
        model.to(device)
        total = torch.zeros((), device=device)
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
            loss.backward()
            if skip_bad and (torch.isnan(loss) or torch.isinf(loss)):
                opt.zero_grad()
                continue
            opt.step()
            opt.zero_grad()
            total += loss.detach()
"""

NEGATED_OR_TEST = """
    import torch


    class Fitter:
        def __init__(self, net, device, clip_free=False):
            self.net = net.to(device)
            self.device = device
            self.clip_free = clip_free
            self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)

        def fit(self, stream):
            for x, y in stream:
                gap = (self.net(x.to(self.device)) - y.to(self.device)).pow(2).mean()
                gap.backward()
                if not (self.clip_free or gap < 10.0):
                    torch.nn.utils.clip_grad_norm_(self.net.parameters(), 1.0)
                self.opt.step()
                self.opt.zero_grad()
"""


def test_a_tensor_test_behind_a_flag_in_an_and_chain_is_found() -> None:
    expr = "if skip_bad and (torch.isnan(loss) or torch.isinf(loss)):"
    assert _found(FLAGGED_NAN_TEST) == [(11, "DL401", _branch_message(expr))]


def test_a_comparison_inside_a_negated_or_chain_is_found() -> None:
    expr = "if not (self.clip_free or gap < 10.0):"
    assert _found(NEGATED_OR_TEST) == [(16, "DL401", _branch_message(expr))]


def test_the_device_side_filter_is_clean() -> None:
    fixed = FLAGGED_NAN_TEST.replace(
        "            if skip_bad and (torch.isnan(loss) or torch.isinf(loss)):\n"
        "                opt.zero_grad()\n"
        "                continue\n",
        "",
    )
    assert _found(fixed) == []


def test_a_tensor_test_guarded_by_a_logging_interval_is_clean() -> None:
    logged = FLAGGED_NAN_TEST.replace("for x, y in loader:", "for step, (x, y) in enumerate(loader):").replace(
        "if skip_bad and (", "if step % 100 == 0 and ("
    )
    assert _found(logged) == []


# -- a discarded move of an instance of a file class whose move returns a copy ------------------

COPYING_BATCH_CLASS = """
    import torch


    class Pair:
        def __init__(self, left, right):
            self.left = left
            self.right = right

        def to(self, where):
            return Pair(self.left.to(where), self.right.to(where))

        def pin(self):
            self.left = self.left.pin_memory()
            return self


    def evaluate(net, rows, where):
        net.to(where)
        scores = []
        for left, right in rows:
            pair = Pair(left, right)
            pair.to(where)
            scores.append(net(pair.left, pair.right))
        return scores


    def evaluate_one(net, pair: Pair, where):
        pair.to(where)
        return net(pair.left, pair.right)
"""

GUARDED_RECORD = """
    import torch


    class Record(dict):
        def cpu(self):
            out = Record()
            for key, value in self.items():
                out[key] = value.cpu() if isinstance(value, torch.Tensor) else value
            return out


    def collect(step_outputs, offload):
        kept = []
        for item in step_outputs:
            if isinstance(item, Record):
                if offload:
                    item.cpu()
            kept.append(item)
        return kept
"""


def _discarded(call: str, owner: str, name: str) -> str:
    return (
        f"`{call}` returns a new `{owner}` that is thrown away, so `{name}` is not moved; assign it: `{name} = {call}`"
    )


def test_a_discarded_move_of_a_constructed_or_annotated_copying_instance_is_found() -> None:
    assert _found(COPYING_BATCH_CLASS) == [
        (23, "DL104", _discarded("pair.to(where)", "Pair", "pair")),
        (29, "DL104", _discarded("pair.to(where)", "Pair", "pair")),
    ]


def test_a_discarded_move_of_an_instance_an_isinstance_test_names_is_found() -> None:
    assert _found(GUARDED_RECORD) == [(18, "DL104", _discarded("item.cpu()", "Record", "item"))]


def test_kept_moves_and_in_place_movers_are_clean() -> None:
    kept = COPYING_BATCH_CLASS.replace("            pair.to(where)", "            pair = pair.to(where)").replace(
        "        pair.to(where)\n        return", "        pair = pair.to(where)\n        return"
    )
    assert _found(kept) == []
    assert (
        _found(GUARDED_RECORD.replace("                    item.cpu()", "                    item = item.cpu()")) == []
    )
    # a `to()` that moves the instance's own fields and returns `self` works in place
    in_place = COPYING_BATCH_CLASS.replace(
        "            return Pair(self.left.to(where), self.right.to(where))",
        "            self.left, self.right = self.left.to(where), self.right.to(where)\n            return self",
    )
    assert _found(in_place) == []


# -- a tracer, exporter or graph writer runs the module on its example input --------------------

TRACED_EXAMPLES = """
    import torch
    from torch.utils.data import DataLoader
    from torch.utils.tensorboard import SummaryWriter


    def export(net, dataset, where, path):
        net = net.to(where).eval()
        loader = DataLoader(dataset, batch_size=4)
        sample, _ = next(iter(loader))
        scripted = torch.jit.trace(net, sample)
        scripted.save(path)


    def export_onnx(net, loader, where, path):
        net.to(where)
        for images, masks in loader:
            torch.onnx.export(net, (images, masks), path)
            break


    def log_graph(net, loader, where):
        board = SummaryWriter()
        net.to(where)
        first = next(iter(loader))[0]
        board.add_graph(model=net, input_to_model=first)
"""


def _unmoved(batch: str, model: str) -> str:
    return (
        f"`{batch}` comes from a DataLoader and is still on the CPU, but `{model}` was moved to the device;"
        f" move it first: `{batch} = {batch}.to(where)`"
    )


def test_examples_handed_to_tracers_exporters_and_graph_writers_are_found() -> None:
    assert _found(TRACED_EXAMPLES) == [
        (11, "DL105", _unmoved("sample", "net")),
        (18, "DL105", _unmoved("images", "net")),
        (18, "DL105", _unmoved("masks", "net")),
        (26, "DL105", _unmoved("first", "net")),
    ]


def test_moved_examples_and_a_model_left_on_the_cpu_are_clean() -> None:
    moved = (
        TRACED_EXAMPLES.replace("torch.jit.trace(net, sample)", "torch.jit.trace(net, sample.to(where))")
        .replace("(net, (images, masks), path)", "(net, (images.to(where), masks.to(where)), path)")
        .replace("input_to_model=first)", "input_to_model=first.to(where))")
    )
    assert _found(moved) == []
    on_cpu = TRACED_EXAMPLES.replace("net = net.to(where).eval()", "net = net.eval()").replace(
        "        net.to(where)\n", ""
    )
    assert _found(on_cpu) == []


# -- a module moved only under a device test is on the accelerator the author means -------------

GUARDED_MODULE_MOVE = """
    import torch
    import torch.nn as nn


    def shapes(net, size):
        probe = torch.randn(size)
        with torch.no_grad():
            return net(probe).shape


    def build():
        net = nn.Sequential(nn.Linear(8, 4), nn.ReLU())
        if torch.cuda.is_available():
            net = net.cuda()
        print(shapes(net, (2, 8)))


    def smoke(use_gpu):
        head = nn.Linear(8, 2)
        if use_gpu and torch.cuda.is_available():
            head.to("cuda")
        return head(torch.zeros(1, 8))
"""


def test_a_cpu_tensor_handed_to_a_module_moved_under_a_device_test_is_found() -> None:
    found = _found(GUARDED_MODULE_MOVE)
    assert [(line, code) for line, code, _ in found] == [(7, "DL101"), (23, "DL101")]
    assert found[0][2].startswith(
        "`torch.randn(...)` creates a CPU tensor in `shapes` that is passed to the module `net`"
    )


def test_inputs_placed_with_the_module_are_clean() -> None:
    fixed = GUARDED_MODULE_MOVE.replace(
        "probe = torch.randn(size)", "probe = torch.randn(size, device=next(net.parameters()).device)"
    ).replace("head(torch.zeros(1, 8))", "head(torch.zeros(1, 8, device=head.weight.device))")
    assert _found(fixed) == []
    # without the move, everything stays on the CPU
    on_cpu = GUARDED_MODULE_MOVE.replace("            net = net.cuda()\n", "            pass\n").replace(
        '            head.to("cuda")\n', "            pass\n"
    )
    assert _found(on_cpu) == []
