"""Shapes behind the misses of re-created set sc, fixed in session 41 by helper sc: each tested
in at least two spellings other than the pair's (another structure, not only other names), with
a clean twin that differs by the fix."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))


def _found(source: str, path: str = "train/loop.py") -> list[tuple[int, str, str]]:
    result = lint_source(textwrap.dedent(source), path, DEFAULT)
    return [(f.line, f.code, f.message) for f in result.findings]


# -- 1. an optimizer class chosen from a table the file writes (`OPTIMIZERS[name](params)`) is
#       any of its entries: Adagrad among them creates its state at construction (DL111) ------

TABLE_LOOKUP_BOUND_TO_A_NAME = """
    import torch
    import torch.nn as nn


    def main(args, loader):
        choices = {"adam": torch.optim.Adam, "adagrad": torch.optim.Adagrad}
        opt_cls = choices.get(args.optimizer, torch.optim.SGD)
        model = nn.Linear(8, 2)
        optimizer = opt_cls(model.parameters(), lr=args.lr)
        model.to("cuda")
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
"""

TABLE_OF_PARTIALS_IN_A_METHOD = """
    import functools

    import torch
    import torch.nn as nn

    SOLVERS = [
        functools.partial(torch.optim.SGD, momentum=0.9),
        functools.partial(torch.optim.Adagrad, lr_decay=1e-4),
    ]


    class Experiment:
        def __init__(self, net, solver_index):
            self.net = net
            self.optimizer = SOLVERS[solver_index](self.net.parameters(), lr=0.01)

        def to_gpu(self):
            self.net.cuda()

        def run(self, loader):
            self.to_gpu()
            for x, y in loader:
                loss = nn.functional.mse_loss(self.net(x.cuda()), y.cuda())
                loss.backward()
                self.optimizer.step()
"""


def test_table_lookup_bound_to_a_name_is_adagrad_among_its_entries() -> None:
    assert _found(TABLE_LOOKUP_BOUND_TO_A_NAME) == [
        (
            10,
            "DL111",
            "`opt_cls(model.parameters(), lr=args.lr)` creates Adagrad's `sum` state in its constructor while"
            ' `model` is still on the CPU, so the state stays there after `model.to("cuda")` and the first'
            " `step()` fails; move the model before building the optimizer",
        )
    ]


def test_table_lookup_twin_moves_the_model_first() -> None:
    fixed = TABLE_LOOKUP_BOUND_TO_A_NAME.replace(
        '        optimizer = opt_cls(model.parameters(), lr=args.lr)\n        model.to("cuda")\n',
        '        model.to("cuda")\n        optimizer = opt_cls(model.parameters(), lr=args.lr)\n',
    )
    assert fixed != TABLE_LOOKUP_BOUND_TO_A_NAME
    assert _found(fixed) == []


def test_table_without_an_eager_optimizer_is_clean() -> None:
    assert _found(TABLE_LOOKUP_BOUND_TO_A_NAME.replace("torch.optim.Adagrad", "torch.optim.RMSprop")) == []


def test_table_of_partials_read_in_a_constructor() -> None:
    found = _found(TABLE_OF_PARTIALS_IN_A_METHOD)
    assert [(line, code) for line, code, _ in found] == [(16, "DL111")]
    assert "Adagrad's `sum`" in found[0][2]


def test_table_of_partials_twin_moves_before_building() -> None:
    fixed = TABLE_OF_PARTIALS_IN_A_METHOD.replace("            self.net = net\n", "            self.net = net.cuda()\n")
    assert _found(fixed) == []


# -- 2. a module's weight read in a helper whose every call hands it a module moved to the
#       accelerator is on the device; an in-place draw there (also `torch.nn.init.*_`) with the
#       CPU generator `torch.manual_seed(...)` returns fails (DL115) ---------------------------

INIT_HELPER_TWO_CALLS_NN_INIT = """
    import torch
    import torch.nn as nn


    def reset_head(net, seed):
        gen = torch.manual_seed(seed)
        nn.init.xavier_uniform_(net.classifier.weight, generator=gen)
        nn.init.zeros_(net.classifier.bias)


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(16, 16)
            self.classifier = nn.Linear(16, 4)


    def build(device):
        student = Net().to(device)
        teacher = Net().cuda()
        reset_head(student, 0)
        reset_head(net=teacher, seed=1)
        return student, teacher
"""

INIT_METHOD_ON_TRAINER = """
    import torch
    import torch.nn as nn


    class Trainer:
        def __init__(self, model, seed):
            self.generator = torch.default_generator
            self.generator.manual_seed(seed)
            self.model = model

        def reinit(self, layer):
            layer.weight.normal_(0.0, 0.02, generator=self.generator)


    def run(seed):
        model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1)).to("cuda")
        trainer = Trainer(model, seed)
        trainer.reinit(model[0])
"""


def test_nn_init_on_a_handed_moved_module_weight() -> None:
    found = _found(INIT_HELPER_TWO_CALLS_NN_INIT)
    assert found == [
        (
            8,
            "DL115",
            "`nn.init.xavier_uniform_(...)` draws on cuda but its generator `gen` is a cpu generator, so it fails"
            " with `Expected a 'cuda' device type for generator but found 'cpu'`; create the generator on the"
            ' tensor\'s device (`torch.Generator(device="cuda")`)',
        )
    ]


def test_nn_init_twin_seeds_a_generator_on_the_weight_device() -> None:
    fixed = INIT_HELPER_TWO_CALLS_NN_INIT.replace(
        "gen = torch.manual_seed(seed)", "gen = torch.Generator(device=net.classifier.weight.device).manual_seed(seed)"
    )
    assert _found(fixed) == []


def test_nn_init_on_a_module_one_caller_leaves_on_the_host_is_not_judged() -> None:
    assert _found(INIT_HELPER_TWO_CALLS_NN_INIT.replace("teacher = Net().cuda()", "teacher = Net()")) == []


def test_in_place_draw_on_a_handed_submodule_weight_of_a_moved_model() -> None:
    found = _found(INIT_METHOD_ON_TRAINER)
    assert [(line, code) for line, code, _ in found] == [(13, "DL115")]


# -- 3. a tensor-only use of a parameter's autograd view (`mask.data.long()`, `w.grad.view(-1)`)
#       makes the parameter a tensor that follows the module's inputs: lengths computed from it
#       in a method reached from `forward` are on the device (DL118) ------------------------

LENGTHS_FROM_DATA_VIEW_IN_A_METHOD = """
    import torch
    import torch.nn as nn
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(32, 64, batch_first=True)

        def encode(self, feats, mask):
            lengths = mask.data.long().sum(dim=1)
            packed = pack_padded_sequence(feats, lengths, batch_first=True, enforce_sorted=False)
            out, _ = self.rnn(packed)
            return pad_packed_sequence(out, batch_first=True)[0]

        def forward(self, feats, mask=None):
            return self.encode(feats, mask)
"""

LENGTHS_FROM_DATA_VIEW_THROUGH_A_FUNCTION = """
    import torch.nn as nn
    from torch.nn.utils import rnn


    def packed(seq, seq_mask, batch):
        return rnn.pack_padded_sequence(seq, seq_mask.data.view(batch, -1).sum(1), batch_first=True)


    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(16, 16, batch_first=True)

        def forward(self, seq, seq_mask):
            out, _ = self.lstm(packed(seq, seq_mask, seq.size(0)))
            return out
"""


def test_lengths_from_a_data_view_in_a_method_reached_from_forward() -> None:
    assert _found(LENGTHS_FROM_DATA_VIEW_IN_A_METHOD) == [
        (
            14,
            "DL118",
            "`pack_padded_sequence` needs `lengths` on the CPU, but `lengths` is on the device; pass `lengths.cpu()`",
        )
    ]


def test_lengths_from_a_data_view_twin_moves_them_to_the_host() -> None:
    fixed = LENGTHS_FROM_DATA_VIEW_IN_A_METHOD.replace(
        "pack_padded_sequence(feats, lengths,", "pack_padded_sequence(feats, lengths.cpu(),"
    )
    assert _found(fixed) == []


def test_lengths_from_a_data_view_inline_in_a_module_function() -> None:
    found = _found(LENGTHS_FROM_DATA_VIEW_THROUGH_A_FUNCTION)
    assert [(line, code) for line, code, _ in found] == [(7, "DL118")]
    fixed = LENGTHS_FROM_DATA_VIEW_THROUGH_A_FUNCTION.replace(".sum(1), batch_first", ".sum(1).cpu(), batch_first")
    assert _found(fixed) == []


# -- 4. a module's own `cuda()`/`cpu()` doing work of its own is never run by `module.to(device)`
#       or by a parent module's move (both go through `_apply`); a subclass of a torch layer
#       (`nn.Dropout`, `nn.Linear`) is a module class (DL112) ---------------------------------

CUDA_OVERRIDE_SETS_A_FLAG = """
    import torch
    import torch.nn as nn


    class PositionalTable(nn.Module):
        def __init__(self, n, dim):
            super().__init__()
            self.use_cuda = False
            self.table = nn.Parameter(torch.randn(n, dim))

        def cuda(self, device=None):
            self.use_cuda = True
            return super().cuda(device)

        def forward(self, idx):
            if self.use_cuda:
                idx = idx.cuda()
            return self.table[idx]
"""

CPU_OVERRIDE_ON_A_LINEAR_SUBCLASS = """
    import torch
    import torch.nn as nn


    class MaskedLinear(nn.Linear):
        def __init__(self, n_in, n_out):
            super().__init__(n_in, n_out)
            self.register_buffer("mask", torch.ones(n_out, n_in))
            self.device_name = "cuda"

        def cpu(self):
            super().cpu()
            for child in self.children():
                child.cpu()
            self.device_name = "cpu"
            return self

        def forward(self, x):
            return nn.functional.linear(x, self.weight * self.mask, self.bias)
"""


def test_cuda_override_that_sets_a_flag() -> None:
    assert _found(CUDA_OVERRIDE_SETS_A_FLAG) == [
        (
            12,
            "DL112",
            "`PositionalTable.cuda()` does work of its own that `module.to(device)` and a parent module's"
            " `.cuda()` never run: `nn.Module` moves itself and every submodule through `_apply`, and calls no"
            " submodule's `cuda()`; do that work in an `_apply(self, fn, *args, **kwargs)` override that calls"
            " `super()._apply`, or where it is used, from the device of the tensors it meets",
        )
    ]


def test_cuda_override_twin_does_the_work_in_apply() -> None:
    fixed = CUDA_OVERRIDE_SETS_A_FLAG.replace(
        "        def cuda(self, device=None):\n            self.use_cuda = True\n            return super().cuda(device)\n",
        "        def _apply(self, fn, *args, **kwargs):\n            module = super()._apply(fn, *args, **kwargs)\n"
        "            self.use_cuda = self.table.is_cuda\n            return module\n",
    )
    assert fixed != CUDA_OVERRIDE_SETS_A_FLAG
    assert _found(fixed) == []


def test_cuda_override_that_only_hands_on_is_clean() -> None:
    handed_on = CUDA_OVERRIDE_SETS_A_FLAG.replace("            self.use_cuda = True\n", '            """Move."""\n')
    assert [code for _, code, _ in _found(handed_on)] == []


def test_cpu_override_of_a_torch_layer_subclass() -> None:
    found = _found(CPU_OVERRIDE_ON_A_LINEAR_SUBCLASS)
    assert [(line, code) for line, code, _ in found] == [(12, "DL112")]
    assert found[0][2].startswith("`MaskedLinear.cpu()` does work of its own")


# -- 5. an RNG state is a CPU ByteTensor: one made where an accelerator is the default device
#       (a helper every call runs inside `with torch.device("cuda"):`, or after
#       `set_default_tensor_type`) handed to `set_rng_state` (DL118) ---------------------------

RNG_STATE_IN_A_METHOD_CALLED_UNDER_A_DEVICE_BLOCK = """
    import torch


    class Resumer:
        def __init__(self, path):
            self.saved = torch.load(path, map_location="cpu")

        def restore(self):
            state = torch.as_tensor(self.saved["rng"], dtype=torch.uint8)
            torch.random.set_rng_state(state)

        def run(self, build):
            with torch.device("cuda"):
                model = build()
                self.restore()
            return model
"""

RNG_STATE_UNDER_A_DEFAULT_TENSOR_TYPE = """
    import torch


    def main(saved):
        torch.set_default_tensor_type(torch.cuda.FloatTensor)
        torch.cuda.set_rng_state(torch.tensor(saved["cuda_rng"], dtype=torch.uint8))
"""


def test_rng_state_made_in_a_helper_only_called_under_a_device_block() -> None:
    assert _found(RNG_STATE_IN_A_METHOD_CALLED_UNDER_A_DEVICE_BLOCK) == [
        (
            11,
            "DL118",
            "`set_rng_state` needs `new_state` on the CPU, but `state` is on the device; pass `state.cpu()`",
        )
    ]


def test_rng_state_twin_made_on_the_host() -> None:
    fixed = RNG_STATE_IN_A_METHOD_CALLED_UNDER_A_DEVICE_BLOCK.replace(
        "dtype=torch.uint8)", 'dtype=torch.uint8, device="cpu")'
    )
    assert _found(fixed) == []


def test_rng_state_helper_also_called_outside_the_block_is_not_judged() -> None:
    both = RNG_STATE_IN_A_METHOD_CALLED_UNDER_A_DEVICE_BLOCK.replace(
        "            return model\n", "            self.restore()\n            return model\n"
    )
    assert _found(both) == []


def test_rng_state_under_a_cuda_default_tensor_type() -> None:
    found = _found(RNG_STATE_UNDER_A_DEFAULT_TENSOR_TYPE)
    assert [(line, code) for line, code, _ in found] == [(7, "DL118")]
    fixed = RNG_STATE_UNDER_A_DEFAULT_TENSOR_TYPE.replace("dtype=torch.uint8)", 'dtype=torch.uint8, device="cpu")')
    assert _found(fixed) == []
