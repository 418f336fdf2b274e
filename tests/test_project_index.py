"""Facts across the files of one project: the index, each file's view, caching, and the fixture projects."""

from __future__ import annotations

import ast
import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURES
from fixture_markers import expected_findings

from devicelint.cache import RESULTS_FOLDER
from devicelint.cli import cli
from devicelint.project.helpers import ParameterUses, parameter_uses
from devicelint.project.index import ProjectIndex, project_root
from devicelint.project.summary import absolute_module, summarise

PROJECTS = sorted(p for p in (FIXTURES / "projects").glob("*/*") if p.is_dir())


def _check(args: list[str], cwd: Path | None = None) -> list[dict]:
    old = Path.cwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        result = CliRunner().invoke(cli, ["check", "--output-format", "json", "--select", "ALL", *args])
    finally:
        os.chdir(old)
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def _found(rows: list[dict]) -> set[tuple[str, int, str]]:
    return {(Path(r["path"]).resolve().as_posix(), r["line"], r["code"]) for r in rows}


def _markers(folder: Path) -> set[tuple[str, int, str]]:
    return {
        (path.resolve().as_posix(), line, code)
        for path in folder.rglob("*.py")
        for line, code, _ in expected_findings(path)
    }


@pytest.mark.parametrize("folder", PROJECTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_project(folder: Path) -> None:
    expected = _markers(folder)
    assert folder.name in ("bad", "fixed")
    assert bool(expected) == (folder.name == "bad"), "bad twins carry markers, fixed twins none"
    assert _found(_check(["--no-cache", str(folder)])) == expected


@pytest.mark.parametrize("project", sorted({p.parent for p in PROJECTS}), ids=lambda p: p.name)
def test_fixture_project_needs_the_index(project: Path) -> None:
    # Each project is a bug (or a correct program) that per-file analysis gets wrong.
    wrong = [
        twin.name
        for twin in (project / "bad", project / "fixed")
        if _found(_check(["--no-cache", "--no-project", str(twin)])) != _markers(twin)
    ]
    assert wrong, f"{project.name}: the index changes nothing"


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


MODEL = """import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)
"""
TRAIN = """import torch

from models import Net
from utils import scale


def run(loader):
    model = Net()
    for x in loader:
        x = x.to("cuda")
        model(x * scale(2))
"""
UTILS = """import torch


def scale(n):
    # a helper the model does not use
    return n * 2
"""


def _project(tmp_path: Path) -> Path:
    _write(
        tmp_path,
        {"models/__init__.py": "from .net import Net\n", "models/net.py": MODEL, "train.py": TRAIN, "utils.py": UTILS},
    )
    return tmp_path


def test_a_file_linted_alone_still_reads_its_imports(tmp_path: Path) -> None:
    root = _project(tmp_path)
    rows = _check(["--no-cache", "train.py"], cwd=root)
    assert [(r["line"], r["code"]) for r in rows] == [(11, "DL117")]
    assert _check(["--no-cache", "--no-project", "train.py"], cwd=root) == []


def test_editing_one_module_relints_its_importers_only(tmp_path: Path) -> None:
    root = _project(tmp_path)
    cache = tmp_path / "cache"
    args = ["--cache-dir", str(cache), "."]

    def entries() -> set[str]:
        return {p.name for p in (cache / RESULTS_FOLDER).rglob("*.json")}  # the results, not the index's store

    first = _check(args, cwd=root)
    before = entries()
    assert len(before) == 4
    # A comment changes no summary: only the edited file is linted again.
    (root / "utils.py").write_text(UTILS.replace("does not use", "never uses"), encoding="utf-8")
    assert _check(args, cwd=root) == first
    after_comment = entries()
    assert len(after_comment - before) == 1
    # The model now places itself: train.py, which imports it through the package's re-export,
    # is linted again and its finding goes; the `__init__` that only re-exports it and utils.py
    # are not.
    placed = MODEL.replace("(self):", "(self, device=None):").replace("(4, 2)", "(4, 2, device=device)")
    (root / "models" / "net.py").write_text(placed, encoding="utf-8")
    assert _check(args, cwd=root) == []
    assert len(entries() - after_comment) == 2  # models/net.py (its text) and train.py (its view)


def test_show_project_names_root_and_files(tmp_path: Path) -> None:
    root = _project(tmp_path)
    old = Path.cwd()
    os.chdir(root)
    try:
        result = CliRunner().invoke(cli, ["check", "--show-project", "train.py"])
    finally:
        os.chdir(old)
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0] == f"project root  {root.resolve()}"
    shown = [line.split()[0] for line in lines[1:]]
    assert shown == ["models/__init__.py", "models/net.py", "utils.py"]  # what train.py imports


def test_relative_and_absolute_imports_and_reexports(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "from .models import *\n",
            "pkg/models/__init__.py": "from .net import Net as Network\n",
            "pkg/models/net.py": MODEL,
            "pkg/data.py": "import torch\n\n\ndef make_mask(n):\n    mask = torch.ones(n)\n    return mask.bool()\n",
            "pkg/train.py": (
                "from . import data as D\nfrom .models import Network\nimport pkg.models as M\nfrom pkg import Net\n"
                "from ..outside import Thing\nimport numpy as np\n\n"
                "parts = (Network(), M.Network(), Net(), D.make_mask(3), Thing, np)\n"
            ),
        },
    )
    index = ProjectIndex(tmp_path)
    view = index.view_for(tmp_path / "pkg" / "train.py")
    assert sorted(view.classes) == ["M.Network", "Network"]  # `pkg.Net` was never exported
    assert {name: c.qualified for name, c in view.classes.items()} == {
        "M.Network": "pkg.models.net.Net",
        "Network": "pkg.models.net.Net",
    }
    assert view.classes["Network"].owns_cpu_parameters
    assert view.functions == {"D.make_mask": "cpu-tensor"}


def test_import_cycles_end_and_a_broken_file_stops_nothing(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "a.py": "from b import Net, loop\nfrom c import helper\n\nused = (Net, loop, helper)\n",
            "b.py": "from a import Net, loop\n\nused = (Net, loop)\n",
            "c.py": "def helper(:\n",
            "d.py": "from d import d\nfrom e import *\n\nused = (d, thing)\n",
            "e.py": "from d import *\n\nused = thing\n",
            "train.py": TRAIN.replace("from models import Net", "from a import Net"),
        },
    )
    index = ProjectIndex(tmp_path)
    assert not index.view_for(tmp_path / "a.py")
    assert not index.view_for(tmp_path / "d.py")
    assert not index.view_for(tmp_path / "e.py")
    assert index.summary(tmp_path / "c.py").functions["helper"] == ""  # declares nothing
    rows = _check(["--no-cache", "."], cwd=tmp_path)
    assert [(r["path"], r["code"]) for r in rows] == [("c.py", "DL000")]


def test_star_imports_among_many_modules_resolve_each_name_once(tmp_path: Path) -> None:
    # Twelve modules star-importing each other, and a module re-exporting names it imports
    # (`Net = Net`): resolving tries every star import at every hop, which without memoising
    # grows as (modules ** hops) and never ends.
    files = {f"m{i}.py": "".join(f"from m{j} import *\n" for j in range(12) if j != i) for i in range(12)}
    files["models.py"] = MODEL
    files["m5.py"] += "from models import Net\n\nNet = Net\n"
    names = ", ".join(f"Name{k}" for k in range(20))
    files["front.py"] = f"from m0 import Net, {names}\n\nNet = Net\nused = (Net, {names})\n"
    _write(tmp_path, files)
    index = ProjectIndex(tmp_path)
    index.view_for(tmp_path / "front.py")
    assert index.is_module_class(("m0.Net",), tmp_path / "front.py")
    assert len(index._resolved) < 2000  # every (name, folder) once


def test_root_is_the_config_folder_else_above_the_package(tmp_path: Path) -> None:
    _write(tmp_path, {"src/pkg/__init__.py": "", "src/pkg/mod.py": "", "tools/run.py": ""})
    assert project_root(tmp_path / "src" / "pkg" / "mod.py", None) == (tmp_path / "src").absolute()
    assert project_root(tmp_path / "tools" / "run.py", tmp_path) == tmp_path


def test_summaries_of_functions_and_movers() -> None:
    summary = summarise(
        """
import torch
from torch import nn
from .head import Detect, Segment


def cpu():
    t = torch.zeros(3)
    return t.float()


def placed(x):
    return torch.zeros(3, device=x.device)


def moved():
    return torch.ones(2).cuda()


def mixed(flag):
    if flag:
        return torch.ones(2)
    return torch.ones(2).cuda()


def chained():
    return cpu()


class Model(nn.Module):
    def _apply(self, fn):
        super()._apply(fn)
        m = self.model[-1]
        if isinstance(m, (Detect, Segment)):
            m.stride = fn(m.stride)
        self.table = fn(self.table)
        return self
""",
        "pkg.tasks",
    )
    known = {name: place for name, place in summary.functions.items() if place}
    assert known == {"cpu": "cpu-tensor", "moved": "device-tensor", "chained": "call:pkg.tasks.cpu"}
    model = summary.classes["Model"]
    assert model.moves_others == (("pkg.head.Detect", "stride"), ("pkg.head.Segment", "stride"))
    assert "table" in (model.moved_attributes or ())
    assert absolute_module("pkg.sub.mod", False, 2, "x") == "pkg.x"
    assert absolute_module("pkg.sub", True, 1, None) == "pkg.sub"
    assert absolute_module("top", False, 3, "x") is None


def test_an_imported_model_that_places_its_own_layers_stays_unknown(tmp_path: Path) -> None:
    # Its outputs live wherever its `forward` puts them, which the importing file cannot follow:
    # no device is guessed for them (README's example: a model split over two GPUs).
    split = MODEL.replace("nn.Linear(4, 2)", 'nn.Linear(4, 2).to("cuda:1")')
    train = (
        "from models import Net\n\n\ndef run(loader):\n    model = Net()\n    for x, y in loader:\n"
        '        out = model(x.to("cuda:0"))\n        print((out == y.to("cuda:1")).sum())\n'
    )
    _write(tmp_path, {"models/__init__.py": "from .net import Net\n", "models/net.py": split, "train.py": train})
    view = ProjectIndex(tmp_path).view_for(tmp_path / "train.py")
    assert view.classes["Net"].places_itself and not view.classes["Net"].owns_cpu_parameters
    assert [r["code"] for r in _check(["--no-cache", "train.py"], cwd=tmp_path)] == []


def test_the_store_keeps_summaries_between_runs_and_ignores_damaged_entries(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    store = tmp_path / "store"
    fresh = ProjectIndex(root).view_for(root / "train.py")
    first = ProjectIndex(root, store)
    assert first.view_for(root / "train.py") == fresh
    first.save()
    saved = sorted(store.rglob("*.json"))
    assert saved
    again = ProjectIndex(root, store)
    assert again.view_for(root / "train.py") == fresh
    assert all(id(s) in again._restored for s in again.summaries.values())  # nothing read afresh
    for path in saved:
        path.write_text('{"imports": 3, "kinds": []}', encoding="utf-8")
    assert ProjectIndex(root, store).view_for(root / "train.py") == fresh


def _warm(root: Path, store: Path, path: str) -> tuple[object, ProjectIndex]:
    index = ProjectIndex(root, store)
    view = index.view(root / path)
    index.save()
    return view, index


def test_a_warm_run_reuses_each_view_until_a_file_it_read_changes(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    _write(root, {"other.py": "x = 1\n"})
    store = tmp_path / "store"
    fresh = ProjectIndex(root).view_for(root / "train.py")
    assert "Net" in fresh.classes
    first, index = _warm(root, store, "train.py")
    assert first == fresh and index.summaries  # built
    again, index = _warm(root, store, "train.py")
    assert again == fresh and not index.summaries  # reused: no summary built, none read
    (root / "other.py").write_text("x = 2  # a file train.py does not import\n", encoding="utf-8")
    again, index = _warm(root, store, "train.py")
    assert again == fresh and not index.summaries
    # the same size, written at once (the same timestamp tick): still seen, by its hash
    net = root / "models" / "net.py"
    net.write_text(MODEL.replace("(nn.Module)", "(nn.Modulz)"), encoding="utf-8")
    changed, index = _warm(root, store, "train.py")
    assert "Net" not in changed.classes and index.summaries
    assert _warm(root, store, "train.py")[0] == changed
    net.write_text(MODEL, encoding="utf-8")
    assert _warm(root, store, "train.py")[0] == fresh


def test_a_warm_run_sees_added_files_and_new_movers(tmp_path: Path) -> None:
    source = FIXTURES / "projects" / "head_moved_by_model_apply" / "bad"
    root = tmp_path / "p"
    for path in source.rglob("*.py"):
        _write(root, {path.relative_to(source).as_posix(): path.read_text(encoding="utf-8")})
    store = tmp_path / "store"
    head, tasks = "nn/modules/head.py", root / "nn" / "tasks.py"
    moved = _warm(root, store, head)[0].moved_elsewhere  # type: ignore[attr-defined]
    assert moved == {"Detect": ("anchors", "stride"), "Segment": ("anchors", "stride")}  # Segment(Detect)
    original = tasks.read_text(encoding="utf-8")
    tasks.write_text(original.replace("            m.anchors = fn(m.anchors)\n", ""), encoding="utf-8")
    assert _warm(root, store, head)[0].moved_elsewhere == {"Detect": ("stride",), "Segment": ("stride",)}  # type: ignore[attr-defined]
    tasks.write_text(original.replace("def _apply(", "def _unused("), encoding="utf-8")
    assert _warm(root, store, head)[0].moved_elsewhere == {}  # type: ignore[attr-defined]
    tasks.write_text(original, encoding="utf-8")  # a file becomes a mover again
    assert _warm(root, store, head)[0].moved_elsewhere == moved  # type: ignore[attr-defined]
    # a file added: an import may resolve elsewhere, so every view is built afresh
    _write(root, {"nn/extra.py": "y = 1\n"})
    view, index = _warm(root, store, head)
    assert view.moved_elsewhere == moved and index.summaries  # type: ignore[attr-defined]


def test_a_damaged_view_record_is_ignored(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    store = tmp_path / "store"
    fresh = _warm(root, store, "train.py")[0]
    for path in store.rglob("*.json"):
        if '"views"' in path.read_text(encoding="utf-8"):
            path.write_text('{"views": {"x": 1}, "files": 3}', encoding="utf-8")
    assert _warm(root, store, "train.py")[0] == fresh
    assert _warm(root, store, "train.py")[0] == fresh


def _diff_lines(args: list[str], cwd: Path) -> list[str]:
    old = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(cli, ["check", "--no-cache", "--select", "ALL", "--unsafe-fixes", *args])
    finally:
        os.chdir(old)
    return [line for line in result.stdout.splitlines() if line[:1] in "-+" and line[:3] not in ("---", "+++")]


def test_fix_and_diff_lint_with_the_project_view(tmp_path: Path) -> None:
    # `stride` is moved by the owner's `to()` in another module: only `offsets` is fixed.
    source = FIXTURES / "projects" / "anchors_moved_by_owner_to" / "bad"
    for path in source.rglob("*.py"):
        _write(tmp_path, {path.relative_to(source).as_posix(): path.read_text(encoding="utf-8")})
    fixed_line = '        self.register_buffer("offsets", torch.zeros(anchors, 2), persistent=False)  # expect: DL102'
    assert _diff_lines(["--diff", "."], tmp_path) == [
        "-        self.offsets = torch.zeros(anchors, 2)  # expect: DL102",
        "+" + fixed_line,
    ]
    assert len(_diff_lines(["--no-project", "--diff", "."], tmp_path)) > 2  # per file: stride too
    _diff_lines(["--fix", "."], tmp_path)
    for path in source.rglob("*.py"):
        fixed = (FIXTURES / "projects" / "anchors_moved_by_owner_to" / "fixed" / path.relative_to(source)).read_text()
        assert (tmp_path / path.relative_to(source)).read_text().replace("  # expect: DL102", "") == fixed


BUILDERS = """import torch.nn as nn


class Net(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, 2)

    def forward(self, x):
        return self.fc(x)


def build_model(args):
    model = Net(args.width)
    model.eval()
    return model


def build(args):
    return build_model(args)


def build_moved(args):
    model = Net(args.width)
    model.to(args.device)
    return model


def build_passed(args):
    model = Net(args.width)
    place(model, args)
    return model


def build_placed(args):
    return Net(args.width, device=args.device)


def build_from_moved(args):
    return build_moved(args)
"""
BUILT = """from models.net import build, build_from_moved, build_model, build_moved, build_passed, build_placed


def run(args, loader):
    models = [build_model(args), build(args), build_moved(args), build_passed(args)]
    model, other, moved, passed = build_model(args), build(args), build_moved(args), build_passed(args)
    placed, chained = build_placed(args), build_from_moved(args)
    for x in loader:
        x = x.to("cuda")
        model(x)
        other(x)
        moved(x)
        passed(x)
        placed(x)
        chained(x)
"""


def test_an_imported_builder_returning_an_unmoved_module_is_a_module_built_on_the_cpu(tmp_path: Path) -> None:
    _write(tmp_path, {"models/__init__.py": "", "models/net.py": BUILDERS, "train.py": BUILT})
    view = ProjectIndex(tmp_path).view_for(tmp_path / "train.py")
    assert sorted(view.classes) == ["build", "build_model"]
    assert view.classes["build"].qualified == "models.net.Net" and view.classes["build"].owns_cpu_parameters
    rows = _check(["--no-cache", "train.py"], cwd=tmp_path)
    assert [(r["line"], r["code"], r["message"].split(" and ")[0]) for r in rows] == [
        (10, "DL117", "`model` is built on the CPU by `build_model(...)`"),
        (11, "DL117", "`other` is built on the CPU by `build(...)`"),
    ]


SAVER = """import numpy as np
import torch


def save_embedding(model, out):
    torch.save(model.weight.data.cpu(), "embedding.pt")
    torch.save({"x": torch.from_numpy(np.ones(3)), "ids": [1, 2]}, f"{out}/features.pt")
    torch.save(model.state_dict(), os.path.join(out, "model.pt"))
    torch.save(model.weight.detach().cpu(), out)  # named only by a parameter: unknown
    torch.save(model.weight.data.cpu(), "both.pt")
    torch.save(model.weight.data.cuda(), "both.pt")
"""
LOADER = """import torch


def run(out, path):
    a = torch.load("embedding.pt")
    b = torch.load(f"{out}/features.pt")
    c = torch.load(os.path.join(out, "model.pt"))
    d = torch.load(path)
    e = torch.load("both.pt")
    return a, b, c, d, e
"""


def test_files_saved_from_host_by_another_module_of_the_folder_or_package(tmp_path: Path) -> None:
    from devicelint.project.saves import saves_in
    from devicelint.project.summary import summarise

    saves = summarise(SAVER, "saver").saves(saves_in, ".pt")
    assert saves == {"embedding.pt": True, "features.pt": True, "model.pt": False, "both.pt": False}
    # a preprocessing script that never names a device saves host data whatever it builds
    script = "import torch\nx = load_graph()\nd = {'x': x.y[idx].to(torch.long)}\ntorch.save(d, 'sgc.pt')\n"
    assert summarise(script, "s").saves(saves_in, "sgc.pt") == {"sgc.pt": True}
    assert summarise(script + "device = 'cuda'\n", "s").saves(saves_in, "sgc.pt") == {"sgc.pt": False}
    assert summarise(script + "w = torch.load('w.pt')\n", "s").saves(saves_in, "sgc.pt") == {"sgc.pt": False}
    # ... but for a model's state or what a builder returns, which another module may place
    built = "import torch\nm = build_model()\ntorch.save(m.state_dict(), 'w.pt')\ntorch.save(m, 'm.pt')\n"
    assert summarise(built, "s").saves(saves_in, ".pt") == {"w.pt": False, "m.pt": False}
    # a parameter holds what callers pass; a literal joined with `+` is part of a name
    helper_save = (
        "import torch\n\n\ndef keep(state, d):\n    torch.save(state, d + '/a.pt')\n    torch.save(1, d + '_b.pt')\n"
    )
    assert summarise(helper_save, "s").saves(saves_in, ".pt") == {"a.pt": False}
    # a helper that saves under a file name writes what nobody can see
    helper = "save_checkpoint(model.state_dict(), 'embedding.pt')\n"
    _write(tmp_path, {"scripts/saver.py": SAVER, "scripts/loader.py": LOADER, "other/loader.py": LOADER})
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/io/__init__.py": "", "pkg/io/saver.py": SAVER})
    _write(tmp_path, {"pkg/train.py": LOADER})
    index = ProjectIndex(tmp_path)
    assert index.view_for(tmp_path / "scripts" / "loader.py").host_saved == ("embedding.pt", "features.pt")
    assert index.view_for(tmp_path / "pkg" / "train.py").host_saved == ("embedding.pt", "features.pt")
    assert index.view_for(tmp_path / "other" / "loader.py").host_saved == ()  # another folder
    rows = _check(["--no-cache", "--select", "DL501", "scripts"], cwd=tmp_path)
    assert [(r["line"]) for r in rows if r["path"].endswith("loader.py")] == [7, 8, 9]
    _write(tmp_path, {"scripts/helper.py": helper})
    assert ProjectIndex(tmp_path).view_for(tmp_path / "scripts" / "loader.py").host_saved == ("features.pt",)


def test_a_warm_run_relints_a_loader_when_a_saver_elsewhere_changes(tmp_path: Path) -> None:
    source = FIXTURES / "projects" / "embedding_saved_by_script" / "fixed"
    root = tmp_path / "p"
    for path in source.rglob("*.py"):
        _write(root, {path.relative_to(source).as_posix(): path.read_text(encoding="utf-8")})
    args = ["--cache-dir", str(tmp_path / "cache"), "--select", "DL501", "."]
    saver = root / "node2vec.py"
    host = saver.read_text(encoding="utf-8")

    def found() -> list[tuple[str, int]]:
        return [(Path(r["path"]).name, r["line"]) for r in _check(args, cwd=root)]

    assert found() == []
    assert found() == []  # warm: every view reused
    # the saver now writes the GPU tensor: the loader is linted again and its finding is back
    saver.write_text(host.replace(".data.cpu()", ".data"), encoding="utf-8")
    assert found() == [("gnn.py", 23)]
    saver.write_text(host, encoding="utf-8")
    assert found() == []
    # a new script that saves the same file from the device
    _write(root, {"finetune.py": "import torch\n\n\ndef keep(emb):\n    torch.save(emb.cuda(), 'embedding.pt')\n"})
    assert found() == [("gnn.py", 23)]
    (root / "finetune.py").unlink()
    assert found() == []
    # a warm view of the loader is reused while no saver changed
    store = tmp_path / "store"
    first, index = _warm(root, store, "gnn.py")
    assert first.host_saved == ("embedding.pt",) and index.summaries  # type: ignore[attr-defined]
    _write(root, {"notes.py": "x = 1\n"})  # an added file: views are built afresh once
    _warm(root, store, "gnn.py")
    (root / "notes.py").write_text("x = 2\n", encoding="utf-8")
    again, index = _warm(root, store, "gnn.py")
    assert again == first and not index.summaries
    saver.write_text(host.replace(".data.cpu()", ".data"), encoding="utf-8")
    changed, index = _warm(root, store, "gnn.py")
    assert changed.host_saved == () and index.summaries  # type: ignore[attr-defined]


def _notebook(cells: list[str]) -> str:
    return json.dumps(
        {
            "cells": [
                {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": [c]}
                for c in cells
            ],
            "metadata": {},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    )


def test_a_notebook_sees_the_project_modules_it_imports(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "models/__init__.py": "",
            "models/net.py": MODEL,
            "explore.ipynb": _notebook(
                [
                    "import torch\nfrom models.net import Net\n",
                    'device = torch.device("cuda")\nmodel = Net()\nx = torch.randn(8, 4, device=device)\nout = model(x)\n',
                ]
            ),
        },
    )
    found = {(Path(r["path"]).name, r["code"]) for r in _check(["--no-cache", str(tmp_path)])}
    assert ("explore.ipynb", "DL117") in found
    alone = {(Path(r["path"]).name, r["code"]) for r in _check(["--no-cache", "--no-project", str(tmp_path)])}
    assert ("explore.ipynb", "DL117") not in alone


def _uses(source: str) -> ParameterUses:
    tree = ast.parse(source)
    function = tree.body[-1]
    assert isinstance(function, ast.FunctionDef)
    return parameter_uses(function, [n for n in ast.walk(function) if n is not function])


def test_what_a_function_does_to_the_arguments_it_is_handed() -> None:
    uses = _uses("def show(img, scale=1.0):\n    return img.detach()[0].permute(1, 2, 0).numpy() * scale\n")
    assert uses.to_numpy == (("img", 2),) and uses.returns_moved is None
    assert uses.parameter_at(0, None) == "img" and uses.parameter_at(None, "scale") == "scale"
    assert _uses("def run(model, x):\n    model.eval()\n    return model.generate(x)\n").reads == (
        ("model", "eval", 2),
        ("model", "generate", 3),
    )
    moved = "def send(batch, device):\n    return {k: v.to(device) for k, v in batch.items()}\n"
    assert _uses(moved).returns_moved == "batch"
    assert _uses("def send(x, device):\n    return x.cuda(device)\n").returns_moved == "x"
    # converted or tested first: the function deals with the device itself
    assert not _uses("def show(img):\n    return img.cpu().numpy()\n").to_numpy
    assert not _uses("def show(img):\n    img = img.cpu()\n    return img.numpy()\n").to_numpy
    assert not _uses("def run(m):\n    m = getattr(m, 'module', m)\n    return m.generate()\n").reads
    assert not _uses("def run(m):\n    if hasattr(m, 'module'):\n        pass\n    return m.generate()\n").reads
    # a read under a branch may belong to another kind of object (a DeepSpeed engine)
    branch = "def save(model, scaler):\n    if scaler is None:\n        model.save_checkpoint('d')\n    return model\n"
    assert _uses(branch).reads == ()
    # an attribute the function sets on the object first is its own
    assert _uses("def run(m):\n    m.tag = 1\n    return m.tag\n").reads == ()
    # changed in place, or a path that returns nothing: not a helper that only returns copies
    in_place = "def send(b, d):\n    b['x'] = b['x'].to(d)\n    return {k: v.to(d) for k, v in b.items()}\n"
    assert _uses(in_place).returns_moved is None
    assert _uses("def send(x, d):\n    if d:\n        return x.to(d)\n").returns_moved is None
    assert _uses("def send(x):\n    return x.to('cpu')\n").returns_moved is None


def test_a_warm_run_relints_a_caller_when_an_imported_helper_changes(tmp_path: Path) -> None:
    source = FIXTURES / "projects" / "samples_saved_through_numpy" / "bad"
    root = tmp_path / "p"
    shutil.copytree(source, root)
    args = ["--cache-dir", str(tmp_path / "cache"), "."]
    assert [(r["code"], r["line"]) for r in _check(args, cwd=root)] == [("DL108", 36)]
    helper = root / "utils" / "images.py"
    helper.write_text(helper.read_text().replace("images.detach()", "images.detach().cpu()"), encoding="utf-8")
    assert _check(args, cwd=root) == []


HOST_COPY = """def host_copy(t):
    return t.detach().cpu()
"""
CRITERION = """import torch
import torch.nn.functional as F

from .copies import host_copy


def score_loss(pred, target):
    fit = F.mse_loss(pred, target)
    spread = pred.abs().mean()
    total = fit + spread
    return total, host_copy(torch.stack((fit, spread, total)))
"""
FIT = """from pkg.criterion import score_loss


def fit(net, batches, optim, dev, board):
    for step, (x, y) in enumerate(batches):
        out = net(x.to(dev))
        total, parts = score_loss(out, y.to(dev))
        total.backward()
        optim.step()
        optim.zero_grad()
        board.write([("fit", float(parts[0])), ("spread", float(parts[1]))], step)
"""


def test_each_part_of_an_imported_tuple_lives_where_its_function_puts_it(tmp_path: Path) -> None:
    # `parts` is the host copy the criterion module makes (through a helper of a third module):
    # reading it on every step copies nothing more.
    files = {"pkg/__init__.py": "", "pkg/copies.py": HOST_COPY, "pkg/criterion.py": CRITERION, "fit.py": FIT}
    _write(tmp_path, files)
    view = ProjectIndex(tmp_path).view_for(tmp_path / "fit.py")
    assert view.functions["score_loss"] == "tuple:|cpu-tensor"
    assert _check(["--no-cache", "fit.py"], cwd=tmp_path) == []


def test_imported_tuple_twin_whose_parts_stay_on_the_device_is_reported(tmp_path: Path) -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/copies.py": HOST_COPY,
        "pkg/criterion.py": CRITERION.replace("host_copy(torch.stack(", "(torch.stack(").replace(")))", ")).detach())"),
        "fit.py": FIT,
    }
    _write(tmp_path, files)
    assert [(r["line"], r["code"]) for r in _check(["--no-cache", "fit.py"], cwd=tmp_path)] == [(11, "DL401")]


def test_a_device_tensor_handed_to_an_imported_helper_that_calls_numpy(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "viz.py": "def fake_grid(fake):\n    return fake.detach()[0].numpy()\n",
            "sample.py": (
                "import torch\n\nfrom viz import fake_grid\n\n\ndef show(gen, z):\n"
                "    gen.cuda()\n    fake = gen(z.cuda())\n    return fake_grid(fake)\n"
            ),
        },
    )
    rows = _check(["--no-cache", "sample.py"], cwd=tmp_path)
    assert [(r["code"], r["line"]) for r in rows] == [("DL108", 9)]
    assert "(`viz.fake_grid` calls `.numpy()` on its `fake` at viz.py:2)" in rows[0]["message"]
    assert rows[0]["message"].endswith("call `.cpu()` first: `fake_grid(fake.cpu())`")
    assert _check(["--no-cache", "--no-project", "sample.py"], cwd=tmp_path) == []


def test_a_root_with_more_files_than_a_project_is_not_scanned_whole(tmp_path: Path, monkeypatch) -> None:
    # A script linted alone in a home or temporary folder: the folder is its root, and walking
    # every file below it (then reading every mover and saver) would take minutes.
    import devicelint.project.index as index_module

    _project(tmp_path)
    monkeypatch.setattr(index_module, "_MAX_PROJECT_FILES", 1)
    index = ProjectIndex(tmp_path)
    assert index._walk() == {} and index.too_large
    assert "Net" in index.view_for(tmp_path / "train.py").classes  # imports still resolve, file by file
    rows = _check(["--cache-dir", str(tmp_path / "cache"), "train.py"], cwd=tmp_path)
    assert [(r["line"], r["code"]) for r in rows] == [(11, "DL117")]
    result = CliRunner().invoke(
        cli, ["check", "--cache-dir", str(tmp_path / "cache"), "--show-project", str(tmp_path / "train.py")]
    )
    assert "no whole-project scan" in result.output


SPLIT_CLASSES = """
import torch
from torch import nn


class ByDefaults(nn.Module):
    def __init__(self, first="cuda:0", second: str = "cuda:1"):
        super().__init__()
        self.encoder = nn.Linear(8, 8).to(first)
        self.decoder = nn.Linear(8, 8)
        self.decoder.cuda(1)
        self.half = nn.Linear(8, 8).to(torch.float16)


class ByNames(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.dev0, self.dev1 = cfg.dev0, cfg.dev1
        self.stem = nn.Conv2d(3, 8, 3).to(self.dev0)
        self.head = nn.Conv2d(8, 8, 3).to(device=self.dev1)


class MovedWhole(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(2, 2).to("cuda:0")
        self.b = nn.Linear(2, 2).to("cuda:1")
        self.to("cuda:0")
"""


def test_a_class_summary_lists_the_submodules_its_constructor_places() -> None:
    classes = summarise(SPLIT_CLASSES, "nets").classes
    # in source order; a dtype cast is not a device, a whole-module move undoes the split
    assert classes["ByDefaults"].placed == (("encoder", "cuda:0", True), ("decoder", "cuda:1", True))
    assert classes["ByNames"].placed == (("stem", "self.dev0", False), ("head", "self.dev1", False))
    assert classes["MovedWhole"].placed == ()


LOOP_HELPER = """
def evaluate(model, loader, metric):
    for step, batch in enumerate(loader):
        metric.update(model(batch["pixels"]), batch["labels"])
    return metric.compute()
"""


def test_a_helper_summary_records_the_model_it_calls_on_unmoved_batches() -> None:
    uses = summarise(LOOP_HELPER, "evals").uses["evaluate"]
    assert uses.unmoved_batches == (("model", "loader", "batch", 4),)
    # a function that names a device anywhere may move the batches some way not followed
    moving = LOOP_HELPER.replace("metric):", "metric, device='cuda'):")
    assert summarise(moving, "evals").uses["evaluate"].unmoved_batches == ()


@pytest.mark.parametrize(
    ("model", "found"),
    [
        ("build().cuda()", True),
        ("build()", False),  # never moved: the batches and the model agree
        ("nn.DataParallel(build().cuda())", False),  # the wrapper scatters its inputs itself
    ],
)
def test_a_moved_model_handed_to_an_imported_loop_helper(tmp_path: Path, model: str, found: bool) -> None:
    caller = (
        "import torch\nfrom torch import nn\nfrom evals import evaluate\n\n\n"
        "def build():\n    return nn.Linear(8, 2)\n\n\n"
        f"def main(val_loader, metric):\n    net = {model}\n    return evaluate(net, val_loader, metric)\n"
    )
    _write(tmp_path, {"evals.py": LOOP_HELPER, "main.py": caller})
    rows = [(Path(r["path"]).name, r["line"], r["code"]) for r in _check(["--no-cache", str(tmp_path)])]
    assert [row for row in rows if row[2] == "DL105"] == ([("main.py", 12, "DL105")] if found else [])


BUILDING_HELPER = """
import numpy as np
import torch


def sample_grid(generator, rows):
    codes = torch.randn(rows * rows, 128)
    images = generator.sample(codes)
    return images.detach().cpu().numpy()
"""


def test_a_helper_summary_records_the_model_it_runs_on_tensors_it_builds() -> None:
    uses = summarise(BUILDING_HELPER, "grids").uses["sample_grid"]
    assert uses.host_inputs == (("generator", "torch.randn", "codes", 8),)
    placed = BUILDING_HELPER.replace("128)", "128, device=next(generator.parameters()).device)")
    assert summarise(placed, "grids").uses["sample_grid"].host_inputs == ()


@pytest.mark.parametrize(("model", "found"), [("G().cuda()", True), ("G()", False)])
def test_a_moved_model_handed_to_an_imported_helper_that_builds_its_input(
    tmp_path: Path, model: str, found: bool
) -> None:
    caller = (
        "import torch\nfrom torch import nn\nfrom grids import sample_grid\n\n\n"
        "class G(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = nn.Linear(128, 784)\n\n    def sample(self, z):\n        return self.fc(z)\n\n\n"
        f"def main():\n    gen = {model}\n    return sample_grid(gen, 8)\n"
    )
    _write(tmp_path, {"grids.py": BUILDING_HELPER, "main.py": caller})
    rows = [(Path(r["path"]).name, r["line"], r["code"]) for r in _check(["--no-cache", str(tmp_path)])]
    assert [row for row in rows if row[2] == "DL101"] == ([("main.py", 17, "DL101")] if found else [])


def test_a_class_summary_keeps_where_its_methods_returns_live() -> None:
    text = (
        "import torch\nfrom torch import nn\n\n\nclass Rnn(nn.Module):\n"
        "    def init_hidden(self, n):\n        return torch.zeros(1, n, 8)\n\n"
        "    def placed_hidden(self, n):\n        return torch.zeros(1, n, 8).cuda()\n\n"
        "    def unknown(self, x):\n        return self.fc(x)\n"
    )
    assert summarise(text, "m").classes["Rnn"].method_places == (
        ("init_hidden", "cpu-tensor"),
        ("placed_hidden", "device-tensor"),
    )


def test_a_wrapper_checkpoint_saved_in_one_file_and_loaded_bare_in_another_follows_edits(tmp_path: Path) -> None:
    project = FIXTURES / "projects" / "wrapper_checkpoint_loaded_bare" / "bad"
    root = tmp_path / "proj"
    shutil.copytree(project, root)
    args = ["--cache-dir", str(tmp_path / "cache"), "."]
    assert [(r["path"].rsplit("/", 1)[-1], r["code"]) for r in _check(args, cwd=root)] == [("evaluate.py", "DL204")]
    # the saving script now writes the bare model's keys: the loader's finding goes on a warm run
    train = (root / "train.py").read_text(encoding="utf-8")
    (root / "train.py").write_text(
        train.replace("model.state_dict(), CHECKPOINT", "model.module.state_dict(), CHECKPOINT"), encoding="utf-8"
    )
    assert _check(args, cwd=root) == []


def test_wrapped_state_saves_reads_wrappers_keys_and_unwrapping() -> None:
    from devicelint.project.saves import wrapped_state_saves

    text = (
        "import torch\nfrom torch import nn\nOUT = 'runs/best.pt'\n\n\n"
        "def a(net):\n    net = nn.DataParallel(net).cuda()\n    torch.save({'model': net.state_dict(), 'step': 1}, OUT)\n\n\n"
        "def b(net):\n    net = nn.parallel.DistributedDataParallel(net)\n    torch.save(net.module.state_dict(), 'b.pt')\n\n\n"
        "def c(net):\n    net = nn.DataParallel(net)\n    net = net.module\n    torch.save(net.state_dict(), 'c.pt')\n"
    )
    assert summarise(text, "train").wrapped_saves(wrapped_state_saves) == [("best.pt", "model", 8)]


def test_a_class_summary_lists_what_its_methods_add_into_host_tensors() -> None:
    text = (
        "import torch\n\n\nclass Bank:\n"
        "    def __init__(self, n):\n        self.hits = torch.zeros(n)\n        self.seen = torch.zeros(n)\n"
        "        self.moved = torch.zeros(n)\n        self.given = torch.zeros(n)\n\n"
        "    def reset(self):\n        self.hits = torch.zeros_like(self.hits)\n\n"
        "    def add(self, pred, gold, extra):\n        right = pred == gold\n"
        "        self.hits += right\n        self.seen[gold] += 1\n        self.moved += extra\n        self.given += extra\n\n"
        "    def to(self, device):\n        self.moved = self.moved.to(device)\n\n"
        "    def take(self, t):\n        self.given = t\n"
    )
    updates = summarise(text, "banks").classes["Bank"].host_updates
    # `hits` is rebuilt from a non-factory in reset() (zeros_like follows its argument), `moved`
    # is moved, `given` is also assigned what a caller hands in: only `seen` stays a host table
    assert updates == (("add", ("pred", "gold", "extra"), "gold", "seen", "torch.zeros", 7),)


def test_a_device_chosen_by_an_imported_function_or_constant_is_the_accelerator(tmp_path: Path) -> None:
    utils = 'import torch\n\n\ndef pick_device():\n    return torch.device("cuda" if torch.cuda.is_available() else "cpu")\n'
    config = 'import torch\n\nDEVICE = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")\n'
    scoring = (
        "import torch\nfrom utils import pick_device\n\n\n"
        "def score(net, loader):\n    dev = pick_device()\n    net.to(dev)\n    hits = torch.zeros(())\n"
        "    for x, y in loader:\n        hits += (net(x.to(dev)).argmax(1) == y.to(dev)).sum()\n    return hits\n"
    )
    fitting = (
        "from config import DEVICE\n\n\n"
        "def fit(net, loader, loss_fn):\n    net = net.to(DEVICE)\n    for x, y in loader:\n        loss_fn(net(x), y).backward()\n"
    )
    _write(tmp_path, {"utils.py": utils, "config.py": config, "scoring.py": scoring, "fitting.py": fitting})
    rows = _check(["--no-cache", str(tmp_path)])
    found = sorted((Path(r["path"]).name, r["line"], r["code"]) for r in rows)
    assert found == [("fitting.py", 7, "DL105"), ("fitting.py", 7, "DL105"), ("scoring.py", 8, "DL101")]
    # the advice names the device the file imported, usable where the batch is
    assert all("DEVICE)" in r["message"] for r in rows if r["code"] == "DL105")


def test_a_class_summary_lists_what_its_methods_hand_unmoved_to_the_model_it_moved() -> None:
    text = (
        "class Runner:\n    def __init__(self, net, device):\n        self.net = net.to(device)\n\n"
        "    def step(self, batch):\n        x, y = batch\n        return self.net(x), y\n\n"
        "    def moved_step(self, batch):\n        x = batch[0].to(next(self.net.parameters()).device)\n        return self.net(x)\n"
    )
    assert summarise(text, "runners").classes["Runner"].unmoved_inputs == (("step", ("batch",), "batch", "net", "", 7),)


def test_a_helper_combining_its_argument_with_a_host_constant_of_its_module() -> None:
    text = (
        "import torch\n\nPIXEL_MEAN = torch.tensor([123.7, 116.3, 103.5]).view(-1, 1, 1)\nSCALE = torch.tensor(255.0)\n\n\n"
        "def prep(img):\n    centred = img - PIXEL_MEAN\n    return centred / SCALE\n\n\n"
        "def prep_moved(img):\n    return img - PIXEL_MEAN.to(img.device)\n"
    )
    module = summarise(text, "prep")
    assert module.uses["prep"].mixes == (("img", "PIXEL_MEAN", 8), ("img", "SCALE", 9))
    assert module.uses["prep_moved"].mixes == ()
    # a 0-dim number is no host table: it mixes with device tensors as a scalar
    assert module.host_constants() == {"PIXEL_MEAN": ("torch.tensor", 3)}


def test_every_summary_and_view_field_survives_the_store() -> None:
    # what a warm run reads back must be what the cold run built, field by field
    from dataclasses import asdict

    from devicelint.project.helpers import parameter_uses_from
    from devicelint.project.summary import _class_from
    from devicelint.project.view import view_data, view_from

    root = FIXTURES / "projects"
    for folder in sorted(p for p in root.glob("*/bad") if p.is_dir()):
        index = ProjectIndex(folder)
        for path in sorted(folder.rglob("*.py")):
            view = index.view(path)
            assert view_from(json.loads(json.dumps(view_data(view)))) == view, path
            for helper in view.helpers.values():
                assert parameter_uses_from(json.loads(json.dumps(asdict(helper.uses)))) == helper.uses
        for module in index.summaries.values():
            for name in list(module.classes.built):
                cls = module.classes[name]
                assert _class_from(json.loads(json.dumps(asdict(cls)))) == cls, (folder, name)


def test_a_torch_device_another_module_binds_compared_with_a_string(tmp_path: Path) -> None:
    # `torch.device("cpu") != "cpu"` is always True: the device object is known from its module
    _write(
        tmp_path,
        {
            "cfg/__init__.py": "",
            "cfg/env.py": (
                "import torch\n\nGPU: torch.device = torch.device('cuda:0' if torch.cuda.is_available() else 'cpu')\n"
                "NAME = 'cuda'\n"
            ),
            "cfg/run.py": (
                "import torch\n\nfrom .env import GPU as dev, NAME\n\n\n"
                "def pin(batch):\n"
                "    if dev != 'cpu':\n"
                "        batch = batch.pin_memory()\n"
                "    if dev.type != 'cpu':\n"
                "        batch = batch.to(dev, non_blocking=True)\n"
                "    if NAME == 'cuda':\n"
                "        torch.cuda.synchronize()\n"
                "    return batch\n"
            ),
        },
    )
    rows = _check(["--no-cache", "--select", "DL502", str(tmp_path)])
    assert [(Path(r["path"]).name, r["line"], r["code"]) for r in rows] == [("run.py", 7, "DL502")]
    assert "never equals" in rows[0]["message"] or "always" in rows[0]["message"], rows[0]["message"]
    assert _check(["--no-cache", "--no-project", "--select", "DL502", str(tmp_path)]) == []


def test_a_helper_handing_its_argument_to_a_collective() -> None:
    text = (
        "import torch\nimport torch.distributed\n\n\n"
        "def share(src, count, rank=0):\n"
        "    flat = src.flatten().contiguous()\n"
        "    torch.distributed.broadcast(tensor=flat, src=rank)\n"
        "    return flat\n\n\n"
        "def local_only(value):\n"
        "    out = torch.zeros_like(value)\n"
        "    torch.distributed.all_reduce(out)\n"
        "    return out\n\n\n"
        "def on_gpu_first(value):\n"
        "    value, device = as_cuda(value)\n"
        "    torch.distributed.all_reduce(value)\n"
        "    return value.to(device)\n"
    )
    module = summarise(text, "comm")
    assert module.uses["share"].collectives == (("src", "dist.broadcast", 7),)
    assert module.uses["local_only"].collectives == ()
    assert module.uses["on_gpu_first"].collectives == ()  # rebound before the collective


def test_the_step_calls_a_trainer_class_s_methods_make() -> None:
    text = (
        "import torch\n\n\n"
        "class Engine:\n"
        "    def __init__(self, model, opt):\n"
        "        self.model, self.opt = model, opt\n"
        "        self.loss_scaler = torch.amp.GradScaler('cuda')\n\n"
        "    def backward(self, loss):\n"
        "        self.loss_scaler.scale(loss).backward()\n\n"
        "    def finish(self, clip=None):\n"
        "        if clip:\n"
        "            self.loss_scaler.unscale_(self.opt)\n"
        "            torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)\n"
        "        self._apply_step()\n\n"
        "    def _apply_step(self):\n"
        "        self.loss_scaler.step(self.opt)\n"
        "        self.loss_scaler.update()\n"
        "        self.opt.zero_grad()\n"
    )
    assert summarise(text, "engine").classes["Engine"].step_effects == (
        ("backward", "scaled_backward", "loss_scaler", False, ""),
        ("finish", "unscale", "loss_scaler", True, "opt"),
        ("finish", "clip", "", True, ""),
        ("finish", "scaler_step", "loss_scaler", False, ""),
        ("finish", "update", "loss_scaler", False, ""),
        ("_apply_step", "scaler_step", "loss_scaler", False, ""),
        ("_apply_step", "update", "loss_scaler", False, ""),
    )


def test_a_builder_returning_a_loader_that_does_not_pin_memory() -> None:
    text = (
        "import torch\nfrom torch.utils.data import DataLoader as Loader\n\n\n"
        "def plain(ds, bs):\n    loader = Loader(ds, batch_size=bs, shuffle=True, num_workers=2)\n    return loader\n\n\n"
        "def switched_off(ds):\n    return Loader(ds, 8, pin_memory=False)\n\n\n"
        "def pinned(ds):\n    return Loader(ds, 8, pin_memory=True)\n\n\n"
        "def passed_on(ds, **kw):\n    return Loader(ds, **kw)\n\n\n"
        "def chosen(ds, pin):\n    return Loader(ds, pin_memory=pin)\n"
    )
    module = summarise(text, "loaders")
    assert [n for n in module.functions if module.functions[n] == "unpinned-loader"] == ["plain", "switched_off"]


def test_a_settings_instance_whose_field_defaults_to_a_torch_device(tmp_path: Path) -> None:
    # `opts.dev` is a `torch.device` wherever `opts = Options()` is read from: never a string
    _write(
        tmp_path,
        {
            "options.py": (
                "import dataclasses\n\nimport torch\n\n\n@dataclasses.dataclass\nclass Options:\n"
                "    lr: float = 0.1\n    dev: torch.device = torch.device('cuda')\n"
                "    name: str = 'cuda'\n\n\nopts = Options()\nother = Options(dev=None)\n"
            ),
            "run.py": (
                "import torch\n\nimport options as O\n\n\n"
                "def setup():\n"
                "    if O.opts.dev != 'cpu':\n"
                "        torch.backends.cudnn.benchmark = True\n"
                "    if O.opts.name == 'cuda' or O.other.dev == 'cuda':\n"
                "        return O.opts.dev.type\n"
            ),
        },
    )
    rows = _check(["--no-cache", "--select", "DL502", str(tmp_path)])
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("run.py", 7)]
    assert _check(["--no-cache", "--no-project", "--select", "DL502", str(tmp_path)]) == []


def test_a_warm_run_reuses_a_notebook_s_view_until_the_notebook_changes(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    cells = ["import torch\nfrom models.net import Net\n", "model = Net().cuda()\n"]
    _write(root, {"look.ipynb": _notebook(cells)})
    store = tmp_path / "store"
    fresh = ProjectIndex(root).view_for(root / "look.ipynb")
    assert "Net" in fresh.classes
    first, index = _warm(root, store, "look.ipynb")
    assert first == fresh and index.summaries
    again, index = _warm(root, store, "look.ipynb")
    assert again == fresh and not index.summaries  # reused: nothing read again
    # the notebook itself changes (it is outside the walk of modules): its view is built again
    _write(root, {"look.ipynb": _notebook([*cells, "print(model)\n"])})
    changed, index = _warm(root, store, "look.ipynb")
    assert changed == fresh and index.summaries


def test_an_imported_host_constant_copied_in_a_batch_loop(tmp_path: Path) -> None:
    # refactored shape of imported_stats_copied_every_step: read through a module alias, copied
    # with `.cuda()` in an evaluation loop; a copy made once before the loop is silent
    stats = "import torch\n\nMEAN = torch.tensor([0.5, 0.5, 0.5]).view(1, 3, 1, 1)\n"
    script = (
        "import torch\n\nimport stats as S\n\n\n"
        "def evaluate(model, val_loader):\n    correct = 0\n    for images, labels in val_loader:\n"
        "        images = images.cuda() - S.MEAN.cuda()\n        correct += (model(images).argmax(1) == labels.cuda()).sum()\n"
        "    return correct\n\n\n"
        "def evaluate_once(model, val_loader):\n    mean = S.MEAN.cuda()\n    for images, _ in val_loader:\n"
        "        model(images.cuda() - mean)\n"
    )
    _write(tmp_path, {"stats.py": stats, "evaluate.py": script})
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL405"]
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("evaluate.py", 9)]
    assert "stats.py:3" in rows[0]["message"] and "every batch" in rows[0]["message"]


def test_a_library_or_registry_model_returned_by_an_imported_builder_is_built_on_the_cpu(tmp_path: Path) -> None:
    # refactored shapes of torchvision_builder_not_moved and registry_dict_builder: a timm model
    # returned by name, and a registry dict re-exported from its own module and filled at top level
    registry = "from .nets import Small, Wide\n\nNETS = {'small': Small}\nNETS['wide'] = Wide\n"
    nets = (
        "import torch.nn as nn\n\n\nclass Small(nn.Module):\n    def __init__(self, n=10):\n        super().__init__()\n"
        "        self.fc = nn.Linear(8, n)\n\n\nclass Wide(Small):\n    pass\n"
    )
    init = (
        "import timm\n\nfrom .registry import NETS\n\n\n"
        "def create(name, **kw):\n    return NETS[name](**kw)\n\n\n"
        "def backbone(name):\n    net = timm.create_model(name, pretrained=True)\n    net.reset_classifier(0)\n    return net\n\n\n"
        "def moved_head(name):\n    net = timm.create_model(name)\n    net.head.cuda()\n    return net\n"
    )
    script = (
        "import torch\n\nimport zoo\n\n\n"
        "def run(loader, cfg):\n    device = torch.device('cuda')\n    net = zoo.create(cfg.arch, n=cfg.n)\n"
        "    feats = zoo.backbone('resnet50')\n    part = zoo.moved_head('vit_small')\n"
        "    for x, _ in loader:\n        x = x.to(device)\n        net(x)\n        feats(x)\n        part(x)\n"
    )
    files = {"zoo/__init__.py": init, "zoo/registry.py": registry, "zoo/nets.py": nets, "run.py": script}
    _write(tmp_path, files)
    found = sorted((r["line"], r["code"]) for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL117")
    # (`reset_classifier` is no keeping method: the backbone may have been changed, it is not followed)
    assert found == [(13, "DL117")]
    summary = summarise(init, "zoo", True)
    assert summary.functions["create"] == "callk:zoo.registry.NETS[]"
    assert summary.functions["moved_head"] == "callt:timm.create_model"
    assert summarise(registry, "zoo.registry", False).registry("NETS") == ("zoo.nets.Small", "zoo.nets.Wide")


def test_where_a_tensor_function_a_comparison_or_an_index_of_a_host_tensor_lives() -> None:
    text = (
        "import torch\n\n\ndef causal(n):\n    return torch.tril(torch.ones(n, n)) == 0\n\n\n"
        "def inverted(n):\n    return ~torch.ones(n, dtype=torch.bool)\n\n\n"
        "def rows(n):\n    table = torch.arange(100)\n    return table[:n]\n\n\n"
        "def follows(x):\n    return torch.triu(x) != 0\n"
    )
    module = summarise(text, "masks")
    assert [module.functions[n] for n in ("causal", "inverted", "rows", "follows")] == [
        "cpu-tensor",
        "cpu-tensor",
        "cpu-tensor",
        "",
    ]


def test_an_imported_loss_builder_with_a_host_class_weight(tmp_path: Path) -> None:
    # refactored shape of criterion_builder_cpu_weight: `import losses as L`, a BCE with a
    # `pos_weight` bound to a name first; the moved twin is silent
    losses = (
        "import torch\nfrom torch import nn\n\n\n"
        "def make_loss(cfg):\n    pw = torch.FloatTensor([cfg.pos_weight])\n"
        "    criterion = nn.BCEWithLogitsLoss(pos_weight=pw)\n    return criterion\n\n\n"
        "def moved_loss(cfg, device):\n    criterion = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([2.0]))\n"
        "    criterion.to(device)\n    return criterion\n"
    )
    script = (
        "import torch\n\nimport losses as L\n\n\n"
        "def fit(net, loader, cfg):\n    net.cuda()\n    crit = L.make_loss(cfg)\n    other = L.make_loss(cfg).cuda()\n"
        "    for x, y in loader:\n        (crit(net(x.cuda()), y.cuda()) + other(net(x.cuda()), y.cuda())).backward()\n"
    )
    _write(tmp_path, {"losses.py": losses, "fit.py": script})
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL106"]
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("fit.py", 8)]
    assert "losses.py:7" in rows[0]["message"]
    assert summarise(losses, "losses").functions["moved_loss"] == ""


def test_a_wrapper_kept_on_self_and_saved_by_a_method_is_loaded_bare_elsewhere(tmp_path: Path) -> None:
    # refactored shape of ddp_checkpoint_saved_by_trainer_method: wrapped in a set-up method,
    # saved under a checkpoint key; a class that unwraps the attribute before saving is silent
    engine = (
        "import torch\nimport torch.nn as nn\n\n\nclass Engine:\n    def __init__(self, net, ckpt_dir):\n"
        "        self.net = net\n        self.ckpt_dir = ckpt_dir\n\n    def setup(self):\n"
        "        self.net = nn.DataParallel(self.net).cuda()\n\n    def save(self, epoch):\n"
        '        torch.save({"model": self.net.state_dict(), "epoch": epoch}, f"{self.ckpt_dir}/last.pth")\n\n\n'
        "class Unwrapping(Engine):\n    def setup(self):\n        self.net = nn.DataParallel(self.net).cuda()\n\n"
        "    def finish(self):\n        self.net = self.net.module\n\n    def save(self, epoch):\n"
        '        torch.save(self.net.state_dict(), f"{self.ckpt_dir}/final.pth")\n'
    )
    loader = (
        "import torch\nimport torch.nn as nn\n\n\ndef load(ckpt_dir):\n    net = nn.Linear(4, 2)\n"
        '    ckpt = torch.load(f"{ckpt_dir}/last.pth", map_location="cpu")\n    net.load_state_dict(ckpt["model"])\n'
        '    other = nn.Linear(4, 2)\n    other.load_state_dict(torch.load(f"{ckpt_dir}/final.pth", map_location="cpu"))\n'
        "    return net, other\n"
    )
    _write(tmp_path, {"engine.py": engine, "load.py": loader})
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL204"]
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("load.py", 8)]
    assert "engine.py:14" in rows[0]["message"]


def test_a_collate_function_that_calls_an_imported_helper_making_cuda_tensors(tmp_path: Path) -> None:
    # refactored shape of dataset_calls_cuda_helper_elsewhere: a collate function, a helper that
    # builds with `device="cuda"`; a helper that moves to the device it is handed is not certain
    tensors = (
        'import torch\n\n\ndef stack_ids(rows):\n    return torch.tensor(rows, device="cuda")\n\n\n'
        "def stack_on(rows, device):\n    return torch.tensor(rows).to(device)\n"
    )
    data = (
        "from torch.utils.data import DataLoader\n\nfrom utils.tensors import stack_ids, stack_on\n\n\n"
        "def collate_batch(items):\n    return stack_ids([i[0] for i in items]), stack_on([i[1] for i in items], 'cpu')\n\n\n"
        "def make_loader(ds):\n    return DataLoader(ds, batch_size=8, num_workers=4, collate_fn=collate_batch)\n"
    )
    _write(tmp_path, {"utils/__init__.py": "", "utils/tensors.py": tensors, "data.py": data})
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL109"]
    assert [(Path(r["path"]).name, r["line"], r["column"]) for r in rows] == [("data.py", 7, 12)]
    assert "utils/tensors.py:5" in rows[0]["message"]


def test_an_imported_module_class_that_packs_the_lengths_it_is_handed(tmp_path: Path) -> None:
    # refactored shape of pack_padded_lengths_in_model: a method other than `forward`, the
    # lengths cast first; lengths left on the host, or a class that moves them back, are silent
    rnn = (
        "import torch.nn as nn\n\n\nclass Tagger(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.emb = nn.Embedding(100, 8)\n        self.lstm = nn.LSTM(8, 8, batch_first=True)\n\n"
        "    def encode(self, x, lens):\n        emb = self.emb(x)\n"
        "        return nn.utils.rnn.pack_padded_sequence(emb, lens.long(), batch_first=True, enforce_sorted=False)\n\n\n"
        "class SafeTagger(Tagger):\n    def encode(self, x, lens):\n        lens = lens.cpu()\n"
        "        return nn.utils.rnn.pack_padded_sequence(self.emb(x), lens, batch_first=True)\n"
    )
    script = (
        "import torch\n\nfrom models.rnn import SafeTagger, Tagger\n\n\n"
        "def run(loader):\n    tagger = Tagger().cuda()\n    safe = SafeTagger().cuda()\n"
        "    for x, lens in loader:\n        tagger.encode(x.cuda(), lens.cuda())\n        tagger.encode(x.cuda(), lens)\n"
        "        safe.encode(x.cuda(), lens.cuda())\n"
    )
    _write(tmp_path, {"models/__init__.py": "", "models/rnn.py": rnn, "run.py": script})
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL118"]
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("run.py", 10)]
    assert "models/rnn.py:12" in rows[0]["message"]
    classes = summarise(rnn, "models.rnn").classes
    assert classes["Tagger"].host_only == (("encode", ("x", "lens"), "lens", "lengths", "pack_padded_sequence", 12),)
    assert classes["SafeTagger"].host_only == ()


def test_a_plain_class_method_returning_a_host_tensor_built_from_its_attributes(tmp_path: Path) -> None:
    # refactored shape of class_weights_from_dataset_method: the class read through a module
    # alias, its method dividing a number by the host table; a class that moves the table is silent
    stats = (
        "import torch\n\n\nclass LabelStats:\n    def __init__(self, freqs):\n"
        "        self.freqs = torch.tensor(freqs, dtype=torch.float32)\n\n"
        "    def inverse(self):\n        return len(self.freqs) / self.freqs\n\n\n"
        "class MovedStats(LabelStats):\n    def to_gpu(self):\n        self.freqs = self.freqs.cuda()\n\n"
        "    def inverse(self):\n        return 1.0 / self.freqs\n"
    )
    script = (
        "import torch\nimport torch.nn as nn\n\nimport stats as S\n\n\n"
        "def fit(net, loader, freqs):\n    net.cuda()\n    counts = S.LabelStats(freqs)\n"
        "    loss = nn.NLLLoss(weight=counts.inverse())\n    moved = S.MovedStats(freqs)\n"
        "    other = nn.NLLLoss(weight=moved.inverse())\n"
        "    for x, y in loader:\n        (loss(net(x.cuda()), y.cuda()) + other(net(x.cuda()), y.cuda())).backward()\n"
    )
    _write(tmp_path, {"stats.py": stats, "fit.py": script})
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL106"]
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("fit.py", 10)]
    classes = summarise(stats, "stats").classes
    assert classes["LabelStats"].method_places == (("inverse", "cpu-tensor"),)
    assert classes["MovedStats"].method_places == ()


def test_a_model_picked_by_name_from_torchvision_by_an_imported_builder(tmp_path: Path) -> None:
    # `models.__dict__[arch](...)` (pytorch/examples' ImageNet script) and `getattr(models, arch)`
    # moved into a builder of another module; the moved twin is silent
    nets = (
        "import torchvision\nimport torchvision.models as models\n\n\n"
        "def create(arch):\n    return models.__dict__[arch](weights=None)\n\n\n"
        "def create_named(arch, n):\n    net = getattr(torchvision.models, arch)(num_classes=n)\n    return net\n"
    )
    script = (
        "import torch\n\nfrom nets import create, create_named\n\n\n"
        "def run(loader, arch):\n    a = create(arch)\n    b = create_named(arch, 10).cuda()\n"
        "    for x, _ in loader:\n        a(x.cuda())\n        b(x.cuda())\n"
    )
    _write(tmp_path, {"nets.py": nets, "run.py": script})
    found = sorted((r["line"], r["code"]) for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL117")
    assert found == [(10, "DL117")]


def test_a_registry_read_with_get_picks_one_of_its_classes() -> None:
    text = (
        "from .unet import UNet\nfrom .fcn import FCN\n\nMODELS = {'unet': UNet, 'fcn': FCN}\n\n\n"
        "def build(name, n):\n    return MODELS.get(name)(n_classes=n)\n\n\n"
        "def changed(name):\n    MODELS.update(extra=None)\n    return MODELS[name]()\n"
    )
    module = summarise(text, "models", True)
    assert module.functions["build"] == "call:models.MODELS[]"
    # a registry changed anywhere in the module is no known set of classes
    assert module.registry("MODELS") is None


def test_a_class_s_step_calls_are_those_on_its_scaler_and_optimizer_only() -> None:
    # a profiler's, a scheduler's or an EMA's `step()`/`update()` is no training step
    text = (
        "import torch\n\n\n"
        "class Loop:\n"
        "    def __init__(self, model, profiler, ema):\n"
        "        self.optim = torch.optim.Adam(model.parameters())\n"
        "        self.sched = torch.optim.lr_scheduler.StepLR(self.optim, 10)\n"
        "        self.prof, self.ema = profiler, ema\n"
        "        self.amp = torch.amp.GradScaler('cuda')\n\n"
        "    def tick(self):\n"
        "        self.prof.step()\n"
        "        self.sched.step()\n"
        "        self.ema.update()\n"
        "        self.amp.step(self.optim)\n"
        "        self.amp.update()\n"
        "        self.optim.step()\n"
    )
    assert summarise(text, "loop").classes["Loop"].step_effects == (
        ("tick", "scaler_step", "amp", False, ""),
        ("tick", "update", "amp", False, ""),
        ("tick", "optimizer_step", "optim", False, ""),
    )


def test_what_a_helper_s_helper_does_counts_as_the_helper_s_own(tmp_path: Path) -> None:
    # refactored shapes of numpy_in_helpers_helper, item_in_metric_helpers_helper and
    # eval_helper_runs_model_two_levels: the last helper two modules away, reached by keyword,
    # through a package alias and a parameter rebound to its own values; a helper that hands on a
    # host copy, or moves the model it hands on, passes nothing on
    _write(
        tmp_path,
        {
            "viz/__init__.py": "",
            "viz/convert.py": (
                "def as_array(tensor, scale=1):\n    tensor = tensor.float().clamp(0, 1) * 255\n"
                "    return tensor.detach().numpy() * scale\n\n\n"
                "def scalar(value):\n    return float(value.sum())\n\n\n"
                "def forward_all(net, batches, device):\n"
                "    return [net(b.to(device)) for b in batches]\n"
            ),
            "viz/plots.py": (
                "from viz import convert as C\n\n\n"
                "def to_image(img):\n    return C.as_array(tensor=img[0], scale=255)\n\n\n"
                "def to_host_image(img):\n    return C.as_array(img.cpu())\n\n\n"
                "def error(pred, target):\n    gap = (pred - target).abs()\n    return C.scalar(gap)\n\n\n"
                "def run(net, batches, device):\n    return C.forward_all(net, batches, device)\n\n\n"
                "def run_moved(net, batches, device):\n    net.to(device)\n    return C.forward_all(net, batches, device)\n"
            ),
            "loop.py": (
                "import torch\nimport torch.nn as nn\n\nimport viz.plots as vp\n\n\n"
                "def main(loader):\n"
                "    net = nn.Linear(8, 8).cuda()\n"
                "    opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
                "    total = 0.0\n"
                "    for x, y in loader:\n"
                "        x, y = x.cuda(), y.cuda()\n"
                "        out = net(x)\n"
                "        loss = (out - y).pow(2).mean()\n"
                "        opt.zero_grad()\n"
                "        loss.backward()\n"
                "        opt.step()\n"
                "        total += vp.error(out, y)\n"
                "        picture = vp.to_image(out)\n"
                "        host = vp.to_host_image(out)\n"
                "    cold, warm = nn.Linear(8, 8), nn.Linear(8, 8)\n"
                "    vp.run(cold, [x], 'cuda')\n"
                "    vp.run_moved(warm, [x], 'cuda')\n"
                "    return total, picture, host\n"
            ),
        },
    )
    found = sorted((r["line"], r["code"]) for r in _check(["--no-cache", str(tmp_path)]) if r["code"].startswith("DL"))
    assert found == [(18, "DL401"), (19, "DL108"), (22, "DL117")]
    alone = [
        r for r in _check(["--no-cache", "--no-project", str(tmp_path)]) if r["code"] in ("DL108", "DL117", "DL401")
    ]
    assert alone == []


def test_a_parameter_rebound_to_its_own_values_is_still_what_was_handed() -> None:
    kept = _uses("def f(x):\n    x = (x.detach().float() + 1) / 2\n    return x[0].numpy()\n")
    assert kept.to_numpy == (("x", 3),)
    for rebinding in ("x.cpu()", "x.type_as(y)", "x.to(y)", "x + y", "x[idx]", "norm(x)"):
        uses = _uses(f"def f(x, y, idx):\n    x = {rebinding}\n    return x.numpy()\n")
        assert uses.to_numpy == (), rebinding


def test_a_registry_a_decorator_fills(tmp_path: Path) -> None:
    # refactored shape of decorator_registry_model: a plain decorator (no call) reached through a
    # module alias, the classes in a module the package imports; a registry one of whose classes
    # places itself builds no known CPU model
    layer = "import torch.nn as nn\n\n\n"
    _write(
        tmp_path,
        {
            "nets/__init__.py": "from . import small\nfrom .factory import build, build_placed\n",
            "nets/factory.py": (
                "ZOO = {}\nPLACED = {}\n\n\n"
                "def register(cls):\n    ZOO[cls.__name__.lower()] = cls\n    return cls\n\n\n"
                "def register_placed(key):\n    def add(fn):\n        PLACED[key] = fn\n        return fn\n\n    return add\n\n\n"
                "def build(name):\n    return ZOO[name]()\n\n\n"
                "def build_placed(name):\n    return PLACED[name]()\n"
            ),
            "nets/small.py": (
                layer + "from . import factory\n\n\n"
                "@factory.register\nclass Tiny(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                "        self.fc = nn.Linear(4, 2)\n\n    def forward(self, x):\n        return self.fc(x)\n\n\n"
                "@factory.register\nclass Small(Tiny):\n    pass\n\n\n"
                "@factory.register_placed('tiny')\nclass PlainTiny(Tiny):\n    pass\n\n\n"
                "@factory.register_placed('gpu')\nclass OnGpu(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                "        self.fc = nn.Linear(4, 2).to('cuda')\n\n    def forward(self, x):\n        return self.fc(x)\n"
            ),
            "run.py": (
                "import torch\n\nimport nets\n\n\n"
                "def main(name):\n    a = nets.build(name)\n    b = nets.build_placed(name)\n"
                "    x = torch.randn(3, 4, device='cuda')\n    return a(x), b(x)\n"
            ),
        },
    )
    found = sorted((r["line"], r["code"]) for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL117")
    assert found == [(10, "DL117")]
    registry = summarise((tmp_path / "nets/factory.py").read_text(), "nets.factory").registry("ZOO")
    assert registry == ("@nets.factory.register",)


def test_a_dataset_calls_a_method_it_inherits_that_returns_a_gpu_tensor(tmp_path: Path) -> None:
    # refactored shape of dataset_mixin_loads_to_cuda: the base is itself a dataset (no items of
    # its own) imported through a package alias, the call in a helper method `__getitem__` calls;
    # a subclass that overrides the method, and a base that moves to a device variable, are silent
    _write(
        tmp_path,
        {
            "data/__init__.py": "",
            "data/base.py": (
                "import torch\nfrom torch.utils.data import Dataset\n\n\n"
                "class ArrayDataset(Dataset):\n    def __init__(self, arrays, device='cpu'):\n"
                "        self.arrays, self.device = arrays, device\n\n"
                "    def tensor(self, i):\n        return torch.as_tensor(self.arrays[i]).cuda()\n\n"
                "    def placed(self, i):\n        return torch.as_tensor(self.arrays[i]).to(self.device)\n"
            ),
            "sets.py": (
                "import torch\n\nimport data.base as B\n\n\n"
                "class Windows(B.ArrayDataset):\n    def __len__(self):\n        return len(self.arrays)\n\n"
                "    def _sample(self, i):\n        return self.tensor(i)\n\n"
                "    def __getitem__(self, i):\n        return self._sample(i), self.placed(i)\n\n\n"
                "class HostWindows(B.ArrayDataset):\n    def tensor(self, i):\n        return torch.as_tensor(self.arrays[i])\n\n"
                "    def __getitem__(self, i):\n        return self.tensor(i)\n"
            ),
        },
    )
    found = sorted((r["line"], r["code"]) for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL109")
    assert found == [(11, "DL109")]
    alone = [r for r in _check(["--no-cache", "--no-project", str(tmp_path / "sets.py")]) if r["code"] == "DL109"]
    assert alone == []


def test_a_checkpoint_a_class_saves_from_the_wrapper_another_class_of_its_hierarchy_keeps(tmp_path: Path) -> None:
    # refactored shape of base_trainer_saves_dataparallel: the base (in a package beside the
    # script) wraps with DDP in its constructor, the subclass in another module saves through a
    # name bound to a dict; a class outside the hierarchy that wraps the same attribute, and a
    # subclass that saves the unwrapped `.module`, say nothing
    _write(
        tmp_path,
        {
            "engine/__init__.py": "",
            "engine/core.py": (
                "from torch.nn.parallel import DistributedDataParallel as DDP\n\n\n"
                "class Engine:\n    def __init__(self, net, rank):\n        self.net = DDP(net.cuda(rank), device_ids=[rank])\n\n\n"
                "class Other:\n    def __init__(self, net):\n        self.net = DDP(net)\n"
            ),
            "engine/steps.py": (
                "import torch\n\nfrom .core import Engine\n\n\n"
                "class Checkpointing(Engine):\n    def save(self, epoch):\n"
                "        state = {'epoch': epoch, 'weights': self.net.state_dict()}\n"
                "        torch.save(state, 'last.pt')\n\n\n"
                "class Unwrapped(Engine):\n    def save(self):\n        torch.save(self.net.module.state_dict(), 'clean.pt')\n\n\n"
                "class Alone:\n    def __init__(self, net):\n        self.net = net\n\n"
                "    def save(self):\n        torch.save({'weights': self.net.state_dict()}, 'alone.pt')\n"
            ),
            "serve.py": (
                "import torch\nimport torch.nn as nn\n\n\n"
                "def main():\n    net = nn.Linear(4, 2)\n"
                "    net.load_state_dict(torch.load('last.pt', map_location='cpu')['weights'])\n"
                "    net.load_state_dict(torch.load('clean.pt', map_location='cpu'))\n"
                "    net.load_state_dict(torch.load('alone.pt', map_location='cpu')['weights'])\n"
            ),
        },
    )
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL204"]
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("serve.py", 7)]
    assert "engine/steps.py:9" in rows[0]["message"]


def test_a_weighted_loss_beside_a_model_that_an_imported_trainer_s_constructor_moves(tmp_path: Path) -> None:
    # refactored shape of weighted_criterion_handed_to_trainer: keyword arguments, a `pos_weight`,
    # a trainer in a package that moves with `.cuda()`; a trainer that also moves the loss, and
    # one that keeps the model on the CPU, are silent
    _write(
        tmp_path,
        {
            "fit/__init__.py": "from .loops import Fitter, FitterMovingAll, CpuFitter\n",
            "fit/loops.py": (
                "class Fitter:\n    def __init__(self, net, loss_fn, lr=0.1):\n        self.net = net.cuda()\n"
                "        self.loss_fn = loss_fn\n\n\n"
                "class FitterMovingAll:\n    def __init__(self, net, loss_fn, device):\n"
                "        self.net = net.to(device)\n        self.loss_fn = loss_fn.to(device)\n\n\n"
                "class CpuFitter:\n    def __init__(self, net, loss_fn):\n        self.net = net.to('cpu')\n"
                "        self.loss_fn = loss_fn\n"
            ),
            "run.py": (
                "import torch\nimport torch.nn as nn\n\nimport fit\n\n\n"
                "def one():\n    net = nn.Linear(4, 1)\n    crit = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([3.0]))\n"
                "    return fit.Fitter(loss_fn=crit, net=net)\n\n\n"
                "def two(device):\n    net = nn.Linear(4, 1)\n    crit = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([3.0]))\n"
                "    return fit.FitterMovingAll(net, crit, device)\n\n\n"
                "def three():\n    net = nn.Linear(4, 1)\n    crit = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([3.0]))\n"
                "    return fit.CpuFitter(net, crit)\n"
            ),
        },
    )
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL106"]
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("run.py", 9)]
    classes = summarise((tmp_path / "fit/loops.py").read_text(), "fit.loops").classes
    assert [classes[n].moved_params for n in ("Fitter", "FitterMovingAll", "CpuFitter")] == [
        ("net",),
        ("loss_fn", "net"),
        (),
    ]


def test_an_imported_function_whose_tensor_result_follows_an_argument(tmp_path: Path) -> None:
    # refactored shape of numpy_in_helpers_helper's `sample(model, x, steps)`: the result is
    # computed from an argument handed by keyword, through a loop; host copies, sizes and
    # numbers follow nothing, and a host argument says nothing
    _write(
        tmp_path,
        {
            "ops.py": (
                "import torch\n\n\n"
                "def standardize(images, eps=1e-6):\n    centred = images - images.mean()\n"
                "    return centred / (images.std() + eps)\n\n\n"
                "def refine(net, x, steps):\n    for _ in range(steps):\n        x = x - 0.1 * net(x)\n    return x\n\n\n"
                "def on_host(x):\n    return x.cpu() * 2\n\n\n"
                "def size(x):\n    return x.shape[0] * 2\n"
            ),
            "run.py": (
                "import torch\n\nfrom ops import on_host, refine, size, standardize\n\n\n"
                "def main(net):\n    x = torch.randn(4, 3, device='cuda')\n"
                "    a = standardize(images=x).numpy()\n    b = refine(net, x, 3)[0].numpy()\n"
                "    c = on_host(x).numpy()\n    d = size(x)\n    e = standardize(torch.randn(4, 3)).numpy()\n"
                "    return a, b, c, d, e\n"
            ),
        },
    )
    found = sorted((r["line"], r["code"]) for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL108")
    assert found == [(8, "DL108"), (9, "DL108")]
    functions = summarise((tmp_path / "ops.py").read_text(), "ops").functions
    assert [functions[n] for n in ("standardize", "refine", "on_host", "size")] == [
        "follows:images#0",
        "follows:x#1",
        "cpu-tensor",
        "",
    ]


def test_a_host_read_through_a_part_of_a_call_s_result_is_not_a_helper_s_own(tmp_path: Path) -> None:
    # stylegan2-pytorch's `augment(img, p)` hands `img` to `random_apply_affine`, which reads
    # `.item()` on paddings unpacked from `try_sample_affine_and_pad(img, ...)` (CPU tensors from
    # the image's shape): which part of that result carries `img` is unknown, so `augment` is
    # not a host read of its `img`; the helper itself is judged as before
    loose = _uses("def affine(img, p):\n    out, pads = pad(img, p)\n    return out, pads[0].item()\n")
    assert loose.host_syncs == (("img", ".item()", 3), ("p", ".item()", 3)) and loose.loose_syncs == ("img", "p")
    direct = _uses("def acc(logits, y):\n    hits = logits.argmax(1) == y\n    return hits.float().mean().item()\n")
    assert direct.loose_syncs == ()
    _write(
        tmp_path,
        {
            "aug.py": (
                "def pad(img, p):\n    return img, img.new_zeros(4)\n\n\n"
                "def affine(img, p):\n    out, pads = pad(img, p)\n    return out, pads[0].item()\n\n\n"
                "def augment(img, p):\n    return affine(img, p)\n"
            ),
            "train.py": (
                "import torch\nimport torch.nn as nn\n\nfrom aug import augment\n\n\n"
                "def main(loader):\n    net = nn.Linear(4, 4).cuda()\n    opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
                "    for x, _ in loader:\n        x = x.cuda()\n        x, _ = augment(x, 0.5)\n"
                "        loss = net(x).sum()\n        opt.zero_grad()\n        loss.backward()\n        opt.step()\n"
            ),
        },
    )
    assert [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL401"] == []


def test_a_plotting_script_s_axis_labels_do_not_name_a_device(tmp_path: Path) -> None:
    from devicelint.project.saves import saves_in

    # `plt.xlabel` / `ax.set_xlabel` hold the letters of `xla`; the script still never names a device
    plotted = (
        "import torch\nimport matplotlib.pyplot as plt\n\n"
        "agent = Agent()\nplt.xlabel('episode')\nfig, ax = plt.subplots()\nax.set_xlabel('step')\n"
        "torch.save(agent, 'agent.pkl')\n"
    )
    assert summarise(plotted, "s").saves(saves_in, ".pkl") == {"agent.pkl": True}
    on_tpu = plotted.replace("import torch\n", "import torch\nimport torch_xla.core.xla_model as xm\n")
    assert summarise(on_tpu, "s").saves(saves_in, ".pkl") == {"agent.pkl": False}
    placed = plotted.replace("agent = Agent()", "agent = Agent().to(xm.xla_device())")
    assert summarise(placed, "s").saves(saves_in, ".pkl") == {"agent.pkl": False}
    # across files: a runner in the same folder reloads what the CPU-only trainer saved
    runner = "import torch\n\nagent = torch.load('agent.pkl')\nprint(agent)\n"
    _write(tmp_path, {"ch2/train.py": plotted, "ch2/run.py": runner})
    assert _check(["--no-cache", "--select", "DL501", "ch2"], cwd=tmp_path) == []
    _write(tmp_path, {"ch2/train.py": plotted.replace("agent = Agent()", "agent = Agent().cuda()")})
    assert [r["line"] for r in _check(["--no-cache", "--select", "DL501", "ch2"], cwd=tmp_path)] == [3]


def test_a_method_inherited_from_a_class_of_another_module_is_judged_at_the_call(tmp_path: Path) -> None:
    # mikkelfo/CORE-BEHRT#1 and torchtune#522 split over a hierarchy: `self.to_device(batch)` and
    # `self.record(loss)` in a subclass run methods of a base two modules and one class away
    # (the host read in a helper of a third module); a class of the file that overrides the
    # method, or a call outside a class, runs something else
    _write(
        tmp_path,
        {
            "core/__init__.py": "",
            "core/numbers.py": "def to_number(t):\n    return t.detach().float().mean().item()\n",
            "core/base.py": (
                "from .numbers import to_number\n\n\n"
                "class Root:\n"
                "    def record(self, value, every=1):\n        self.values.append(to_number(value))\n\n"
                "    def to_device(self, batch):\n        return {k: v.to(self.device) for k, v in batch.items()}\n\n\n"
                "class Middle(Root):\n    def describe(self):\n        return type(self).__name__\n"
            ),
            "loops.py": (
                "import torch\n\nfrom core.base import Middle\n\n\n"
                "class Local(Middle):\n    pass\n\n\n"
                "class Loop(Local):\n"
                "    def __init__(self, model):\n"
                "        self.device = torch.device('cuda')\n        self.model = model.to(self.device)\n"
                "        self.values = []\n\n"
                "    def run(self, loader, opt):\n"
                "        for batch in loader:\n"
                "            self.to_device(batch)\n"
                "            batch = self.to_device(batch)\n"
                "            loss = self.model(batch['x']).mean()\n"
                "            opt.zero_grad()\n            loss.backward()\n            opt.step()\n"
                "            self.record(loss)\n\n\n"
                "class Quiet(Middle):\n"
                "    def __init__(self, model):\n"
                "        self.device = torch.device('cuda')\n        self.model = model.to(self.device)\n\n"
                "    def record(self, value, every=1):\n        self.last = value.detach()\n\n"
                "    def to_device(self, batch):\n        for k in list(batch):\n            batch[k] = batch[k].cuda()\n\n"
                "    def run(self, loader, opt):\n"
                "        for batch in loader:\n"
                "            self.to_device(batch)\n"
                "            loss = self.model(batch['x'].to(self.device)).mean()\n"
                "            opt.zero_grad()\n            loss.backward()\n            opt.step()\n"
                "            self.record(loss)\n"
            ),
        },
    )
    rows = _check(["--no-cache", str(tmp_path)])
    assert sorted((Path(r["path"]).name, r["line"], r["code"]) for r in rows) == [
        ("loops.py", 18, "DL104"),
        ("loops.py", 24, "DL401"),
    ]
    assert [r for r in _check(["--no-cache", "--no-project", str(tmp_path)]) if r["code"] in ("DL104", "DL401")] == []


def test_an_unscale_in_a_helper_of_another_module_counts_for_the_optimizer_it_is_handed(tmp_path: Path) -> None:
    # LaWGPT#124 the other way round: the helper of a package unscales first (keywords), the
    # loop's own `unscale_` of the same optimizer raises; the other optimizer of a GAN, or a
    # helper whose unscale runs only when it gets a scaler (None here), unscales nothing twice
    _write(
        tmp_path,
        {
            "tools/__init__.py": "",
            "tools/grads.py": (
                "import torch\n\n\n"
                "def clip(params, opt, amp=None, limit=1.0):\n"
                "    if amp is not None:\n        amp.unscale_(opt)\n"
                "    return torch.nn.utils.clip_grad_norm_(params, limit)\n\n\n"
                "def always(amp, opt, params):\n    amp.unscale_(opt)\n    torch.nn.utils.clip_grad_value_(params, 1.0)\n"
            ),
            "gan.py": (
                "import torch\n\nfrom tools.grads import always, clip\n\n\n"
                "def step(g, d, opt_g, opt_d, loss_g, loss_d):\n"
                "    scaler = torch.amp.GradScaler('cuda')\n"
                "    scaler.scale(loss_d).backward()\n"
                "    always(scaler, opt_d, d.parameters())\n"
                "    scaler.step(opt_d)\n"
                "    scaler.scale(loss_g).backward()\n"
                "    clip(g.parameters(), opt=opt_g, amp=scaler)\n"
                "    scaler.unscale_(opt_g)\n"
                "    clip(g.parameters(), opt=opt_g)\n"
                "    scaler.step(opt_g)\n"
                "    scaler.update()\n"
            ),
        },
    )
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL308"]
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("gan.py", 13)]
    assert "opt_g" in rows[0]["message"]


def test_a_wrapper_handed_to_a_saving_helper_of_another_module(tmp_path: Path) -> None:
    # apex#647 through a helper: a trainer class keeps the DataParallel wrapper on `self` and
    # hands it to `io_utils.dump(net, path=...)`, which saves `net.state_dict()` to that path; the
    # bare model of evaluate.py then misses every key. Handing `.module`, or a helper that saves
    # another parameter's state, is silent
    io_utils = (
        "import torch\n\n\n"
        "def dump(net, opt=None, path='model.pth'):\n    torch.save(net.state_dict(), path)\n\n\n"
        "def dump_opt(net, opt, path):\n    torch.save({'opt': opt.state_dict()}, path)\n"
    )
    trainer = (
        "import os\n\nimport torch.nn as nn\n\nfrom io_utils import dump, dump_opt\n\n\n"
        "class Trainer:\n"
        "    def __init__(self, model, opt, out):\n"
        "        self.net = nn.DataParallel(model.cuda())\n        self.opt = opt\n        self.out = out\n\n"
        "    def finish(self):\n"
        "        dump(self.net, path=os.path.join(self.out, 'best_net.pth'))\n"
        "        dump_opt(self.net, self.opt, os.path.join(self.out, 'opt_state.pth'))\n"
    )
    evaluate = (
        "import torch\n\nfrom model import Net\n\n\n"
        "def load(out):\n"
        "    net = Net()\n"
        "    net.load_state_dict(torch.load(f'{out}/best_net.pth', map_location='cpu'))\n"
        "    return net\n"
    )
    model = "import torch.nn as nn\n\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 2)\n"
    _write(tmp_path, {"io_utils.py": io_utils, "trainer.py": trainer, "evaluate.py": evaluate, "model.py": model})
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL204"]
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("evaluate.py", 8)]
    assert "trainer.py:15" in rows[0]["message"]
    _write(tmp_path, {"trainer.py": trainer.replace("dump(self.net, path", "dump(self.net.module, path")})
    assert [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL204"] == []


def test_a_scaler_stepped_by_a_helper_of_another_module_is_updated_by_its_owner(tmp_path: Path) -> None:
    # MS-AMP#45 across files: `engine.amp.step` steps the scaler it is handed; the function that
    # builds the scaler never updates it (reported at its call); a function handed the scaler by
    # its own caller, a helper that updates too, and the helper's own file stay silent
    _write(
        tmp_path,
        {
            "engine/__init__.py": "",
            "engine/amp.py": (
                "def step(optimizer, loss, *, scaler):\n"
                "    scaler.scale(loss).backward()\n    scaler.step(optimizer)\n    optimizer.zero_grad()\n\n\n"
                "def full_step(optimizer, loss, scaler):\n"
                "    scaler.scale(loss).backward()\n    scaler.step(optimizer)\n    scaler.update()\n"
            ),
            "fit.py": (
                "import torch\n\nfrom engine import amp\n\n\n"
                "def fit(model, loader, opt):\n"
                "    grad_scaler = torch.amp.GradScaler('cuda')\n"
                "    for x in loader:\n"
                "        amp.step(opt, model(x.cuda()).mean(), scaler=grad_scaler)\n\n\n"
                "def fit_owned(model, loader, opt, grad_scaler):\n"
                "    for x in loader:\n"
                "        amp.step(opt, model(x.cuda()).mean(), scaler=grad_scaler)\n\n\n"
                "def fit_full(model, loader, opt):\n"
                "    s = torch.amp.GradScaler('cuda')\n"
                "    for x in loader:\n"
                "        amp.full_step(opt, model(x.cuda()).mean(), s)\n"
            ),
        },
    )
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL303"]
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("fit.py", 9)]
    assert "grad_scaler.update()" in rows[0]["message"]
    alone = [r for r in _check(["--no-cache", "--no-project", str(tmp_path / "engine")]) if r["code"] == "DL303"]
    assert alone == []


def test_a_registry_object_s_classes_are_what_its_get_and_build_return(tmp_path: Path) -> None:
    # mmdetection#9725 / detectron2's META_ARCH_REGISTRY: a registry object (not a dict) filled
    # by `@NETS.register` / `@NETS.register_module()` over the classes of the modules a package
    # imports; a builder of that package returns `NETS.get(name)(**kw)`, and a script calls it
    # (or `NETS.build(cfg)` itself) and never moves the model. A class that places itself among
    # them, or a moved model, is silent
    registry = (
        "class Registry:\n    def __init__(self, name):\n        self._map = {}\n\n"
        "    def register(self, cls):\n        self._map[cls.__name__] = cls\n        return cls\n\n"
        "    def register_module(self):\n        return self.register\n\n"
        "    def get(self, name):\n        return self._map[name]\n\n"
        "    def build(self, cfg):\n        cfg = dict(cfg)\n        return self.get(cfg.pop('type'))(**cfg)\n\n\n"
        "NETS = Registry('nets')\n"
    )
    layer = "import torch.nn as nn\n\nfrom core.registry import NETS\n\n\n@NETS.register\nclass {name}(nn.Module):\n    def __init__(self, width=8):\n        super().__init__()\n        self.fc = nn.Linear(width, 2)\n"
    script = (
        "import torch\n\nfrom core.registry import NETS\nfrom nets import build\n\n\n"
        "def main(loader):\n"
        "    a = build('Mlp', width=8)\n    b = NETS.build({'type': 'Mlp'})\n    c = NETS.build({'type': 'Mlp'}).cuda()\n"
        "    for x in loader:\n        x = x.cuda()\n        print(a(x))\n        print(b(x))\n        print(c(x))\n"
    )
    _write(
        tmp_path,
        {
            "core/__init__.py": "",
            "core/registry.py": registry,
            "nets/__init__.py": "from . import mlp, wide\nfrom .factory import build\n",
            "nets/mlp.py": layer.format(name="Mlp"),
            "nets/wide.py": layer.format(name="Wide").replace("@NETS.register\n", "@NETS.register_module()\n"),
            "nets/factory.py": "from core.registry import NETS\n\n\ndef build(name, **kw):\n    return NETS.get(name)(**kw)\n",
            "main.py": script,
        },
    )
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL117"]
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("main.py", 13), ("main.py", 14)]
    placed = layer.format(name="Wide").replace("nn.Linear(width, 2)", "nn.Linear(width, 2).to('cuda:1')")
    _write(tmp_path, {"nets/wide.py": placed})
    assert [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL117"] == []


def test_a_parameterless_module_built_from_cpu_parts_by_a_builder(tmp_path: Path) -> None:
    # detectron2#1926: a meta-architecture owns no parameters itself; the builder hands it parts
    # it builds right there (a project encoder, a builder's, a `torch.nn` layer, by keyword too),
    # so what it returns is on the CPU. Parts handed in by the builder's caller, moved ones, or
    # one from a builder that moves it, say nothing
    _write(
        tmp_path,
        {
            "arch.py": (
                "import torch.nn as nn\n\n\n"
                "class Encoder(nn.Module):\n    def __init__(self, d=8):\n        super().__init__()\n"
                "        self.proj = nn.Linear(d, d)\n\n\n"
                "def make_encoder(d=8):\n    return Encoder(d)\n\n\n"
                "def make_placed(d=8):\n    return Encoder(d).cuda()\n\n\n"
                "class Seq2Seq(nn.Module):\n    def __init__(self, encoder, decoder, steps=4):\n        super().__init__()\n"
                "        self.encoder = encoder\n        self.decoder = decoder\n        self.steps = steps\n"
            ),
            "build.py": (
                "import torch.nn as nn\n\nfrom arch import Encoder, Seq2Seq, make_encoder, make_placed\n\n\n"
                "def direct(d):\n    return Seq2Seq(encoder=Encoder(d), decoder=nn.GRU(d, d), steps=8)\n\n\n"
                "def through(d):\n    enc = make_encoder(d)\n    model = Seq2Seq(enc, nn.GRU(d, d))\n    return model\n\n\n"
                "def handed(encoder, d):\n    return Seq2Seq(encoder, nn.GRU(d, d))\n\n\n"
                "def moved(d):\n    return Seq2Seq(Encoder(d).cuda(), nn.GRU(d, d).cuda())\n\n\n"
                "def placed(d):\n    return Seq2Seq(make_placed(d), nn.GRU(d, d))\n"
            ),
            "run.py": (
                "import torch\n\nfrom build import direct, handed, moved, placed, through\nfrom arch import Encoder\n\n\n"
                "def main(x):\n    x = x.cuda()\n"
                "    a = direct(8)\n    print(a(x))\n"
                "    b = through(8)\n    print(b(x))\n"
                "    c = handed(Encoder().cuda(), 8)\n    print(c(x))\n"
                "    d = moved(8)\n    print(d(x))\n"
                "    e = placed(8)\n    print(e(x))\n"
            ),
        },
    )
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL117"]
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("run.py", 10), ("run.py", 12)]


RUNNER_WITH_HOST_DEFAULT = """import torch


def score(net, batches, device=torch.device("cpu")):
    hits = 0
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        hits += int((net(x).argmax(1) == y).sum())
    return hits


def fit(net, batches, epochs):
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(epochs):
        for x, y in batches:
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(score(net, batches))
"""


def test_a_helper_whose_device_defaults_to_the_cpu_runs_an_unmoved_model_on_the_host(tmp_path: Path) -> None:
    # `fit` hands `net` to `score` without a device: its moves go to the CPU default
    main = "import torch\nfrom loops import fit\n\nnet = torch.nn.Linear(4, 3)\nfit(net, [], 2)\n"
    _write(tmp_path, {"loops.py": RUNNER_WITH_HOST_DEFAULT, "main.py": main})
    assert [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL117"] == []


def test_a_helper_moving_to_a_device_it_is_given_still_reports_the_unmoved_model(tmp_path: Path) -> None:
    twin = RUNNER_WITH_HOST_DEFAULT.replace('device=torch.device("cpu")', 'device=torch.device("cuda")')
    main = "import torch\nfrom loops import fit\n\nnet = torch.nn.Linear(4, 3)\nfit(net, [], 2)\n"
    _write(tmp_path, {"loops.py": twin, "main.py": main})
    found = [(Path(r["path"]).name, r["line"]) for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL117"]
    assert found == [("main.py", 5)]


def test_a_direct_call_passing_a_gpu_to_a_cpu_default_runner_still_reports_the_unmoved_model(tmp_path: Path) -> None:
    main = (
        "import torch\nfrom loops import score\n\nnet = torch.nn.Linear(4, 3)\n"
        'print(score(net, [], device=torch.device("cuda")))\nprint(score(net, [], "cpu"))\n'
    )
    _write(tmp_path, {"loops.py": RUNNER_WITH_HOST_DEFAULT, "main.py": main})
    found = [(Path(r["path"]).name, r["line"]) for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL117"]
    assert found == [("main.py", 5)]


REPLICATED_TOWER = """import torch
from torch import nn


class Tower(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.blocks = nn.Sequential(nn.Linear(width, width), nn.GELU())
        self.offsets = torch.zeros(width).cuda()
        self.calls = 0
        self.score = lambda h: self.blocks(h).sum(-1)

    def forward(self, x):
        self.calls += 1
        return self.score(x + self.offsets)
"""


def test_a_module_class_replicated_by_dataparallel_in_another_module_is_judged_as_replicated(tmp_path: Path) -> None:
    runner = (
        "import torch\nimport nets as n\n\n\ndef launch(width):\n"
        "    tower = torch.nn.DataParallel(n.Tower(width).to('cuda'), device_ids={ids})\n    return tower\n"
    )
    _write(tmp_path, {"nets.py": REPLICATED_TOWER, "launch.py": runner.format(ids="[0, 1]")})
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] in ("DL102", "DL203")]
    assert [(Path(r["path"]).name, r["line"], r["code"]) for r in rows] == [
        ("nets.py", 9, "DL102"),
        ("nets.py", 11, "DL203"),
        ("nets.py", 14, "DL203"),
    ]
    assert "`nn.DataParallel` in `launch.py` (line 6) runs on per-GPU replicas" in rows[2]["message"]
    # one GPU: a tensor shared by the replicas is the one they need; lost writes are still lost
    _write(tmp_path, {"launch.py": runner.format(ids="[0]")})
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] in ("DL102", "DL203")]
    assert [(r["line"], r["code"]) for r in rows] == [(11, "DL203"), (14, "DL203")]
    # DistributedDataParallel runs one whole model per process: no replicas
    ddp = runner.format(ids="[0]").replace("torch.nn.DataParallel(", "torch.nn.parallel.DistributedDataParallel(")
    _write(tmp_path, {"launch.py": ddp})
    assert [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] in ("DL102", "DL203")] == []


def test_a_class_a_project_builder_returns_is_replicated_when_the_builder_s_result_is_wrapped(tmp_path: Path) -> None:
    builders = "from nets import Tower\n\n\ndef build_tower(cfg):\n    return Tower(cfg.width)\n"
    runner = (
        "import torch\nfrom builders import build_tower\n\n\ndef launch(cfg):\n"
        "    tower = build_tower(cfg).cuda()\n    return torch.nn.DataParallel(tower)\n"
    )
    _write(tmp_path, {"nets.py": REPLICATED_TOWER, "builders.py": builders, "launch.py": runner})
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] in ("DL102", "DL203")]
    assert [(Path(r["path"]).name, r["line"], r["code"]) for r in rows] == [
        ("nets.py", 9, "DL102"),
        ("nets.py", 11, "DL203"),
        ("nets.py", 14, "DL203"),
    ]
    # a builder that returns something else entirely says nothing
    _write(tmp_path, {"builders.py": "import torch\n\n\ndef build_tower(cfg):\n    return torch.nn.Linear(4, 4)\n"})
    assert [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] in ("DL102", "DL203")] == []


def test_a_gpu_tensor_made_by_a_helper_s_helper_is_reported_in_the_dataset_that_calls_the_helper(
    tmp_path: Path,
) -> None:
    # the dataset calls `load_clip` (loading.py), which calls `to_tensor` (ops/tensor_ops.py)
    # on every path; `to_tensor` makes the tensor with `device="cuda"`
    ops = "import torch\n\n\ndef to_tensor(frames):\n    return torch.as_tensor(frames, device='cuda').float()\n"
    loading = (
        "import numpy as np\n\nfrom ops.tensor_ops import to_tensor\n\n\n"
        "def load_clip(path, length):\n    frames = np.load(path)[:length]\n    return to_tensor(frames)\n"
    )
    data = (
        "from torch.utils.data import Dataset\n\nfrom loading import load_clip\n\n\n"
        "class Clips(Dataset):\n"
        "    def __init__(self, paths):\n        self.paths = paths\n\n"
        "    def __len__(self):\n        return len(self.paths)\n\n"
        "    def __getitem__(self, i):\n        return load_clip(self.paths[i], 16)\n"
    )
    _write(tmp_path, {"ops/__init__.py": "", "ops/tensor_ops.py": ops, "loading.py": loading, "data.py": data})
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL109"]
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("data.py", 14)]
    assert "through `loading.load_clip` (loading.py:8" in rows[0]["message"], rows[0]["message"]
    # called only on one branch: not certain for every item
    branch = loading.replace(
        "    return to_tensor(frames)\n", "    if length > 64:\n        return to_tensor(frames)\n    return frames\n"
    )
    _write(tmp_path, {"loading.py": branch})
    assert [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL109"] == []
    # a helper's helper that stays on the host
    _write(tmp_path, {"loading.py": loading, "ops/tensor_ops.py": ops.replace(", device='cuda'", "")})
    assert [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL109"] == []


def test_a_registry_dict_of_builder_functions_builds_their_models(tmp_path: Path) -> None:
    # `ARCHS = {...}` maps names to project functions that return torchvision models unmoved;
    # `get_model` returns `ARCHS[name](n)`: the script's model is on the CPU
    archs = (
        "import torch\nimport torchvision\n\n\n"
        "def small(n):\n    return torchvision.models.resnet18(num_classes=n)\n\n\n"
        "def large(n):\n    net = torchvision.models.resnet50()\n"
        "    net.fc = torch.nn.Linear(2048, n)\n    return net\n\n\n"
        "ARCHS = {'small': small, 'large': large}\n\n\n"
        "def get_model(name, n):\n    return ARCHS[name](n)\n"
    )
    train = (
        "import torch\n\nfrom archs import get_model\n\n\n"
        "def run(loader, name):\n"
        "    device = torch.device('cuda')\n"
        "    model = get_model(name, 10)\n"
        "    for x, y in loader:\n"
        "        out = model(x.to(device))\n"
        "        torch.nn.functional.cross_entropy(out, y.to(device)).backward()\n"
    )
    _write(tmp_path, {"archs.py": archs, "train.py": train})
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL117"]
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("train.py", 10)]
    # one entry moves its model itself: the registry's result is no longer certainly on the CPU
    _write(tmp_path, {"archs.py": archs.replace("    return net\n", "    return net.cuda()\n")})
    assert [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL117"] == []


def test_a_method_inherited_from_a_base_two_modules_away_returns_its_host_tensor(tmp_path: Path) -> None:
    # `Tagger` derives from `Recurrent` (nets/mid.py), which derives from `Base` (nets/base.py),
    # whose `initial_state` builds the state with `torch.zeros` on the host
    base = (
        "import torch\nfrom torch import nn\n\n\nclass Base(nn.Module):\n"
        "    def __init__(self, hidden):\n        super().__init__()\n        self.hidden = hidden\n\n"
        "    def initial_state(self, batch):\n        return torch.zeros(1, batch, self.hidden)\n"
    )
    mid = "from torch import nn\n\nfrom nets.base import Base\n\n\nclass Recurrent(Base):\n    kind = 'gru'\n"
    tagger = (
        "from torch import nn\n\nfrom nets.mid import Recurrent\n\n\nclass Tagger(Recurrent):\n"
        "    def __init__(self, hidden=64):\n        super().__init__(hidden)\n"
        "        self.rnn = nn.GRU(32, hidden)\n\n"
        "    def forward(self, x, h):\n        return self.rnn(x, h)\n"
    )
    train = (
        "import torch\n\nfrom nets.tagger import Tagger\n\n\n"
        "def fit(batches):\n"
        "    model = Tagger().cuda()\n"
        "    for x in batches:\n"
        "        x = x.cuda()\n"
        "        h = model.initial_state(x.size(1))\n"
        "        out, h = model(x, h)\n"
    )
    files = {"nets/__init__.py": "", "nets/base.py": base, "nets/mid.py": mid, "nets/tagger.py": tagger}
    _write(tmp_path, {**files, "train.py": train})
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL101"]
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("train.py", 10)]
    # the class between them defines its own `initial_state` on the parameters' device
    own = mid + (
        "\n    def initial_state(self, batch):\n"
        "        return next(self.parameters()).new_zeros(1, batch, self.hidden)\n"
    )
    _write(tmp_path, {"nets/mid.py": own})
    assert [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL101"] == []


def test_an_accumulator_a_base_class_builds_on_the_host_and_a_subclass_adds_into(tmp_path: Path) -> None:
    # `Histogram.add` (stats/hist.py) adds into `self.counts`, which its base `Stat` (stats/core.py)
    # builds with `torch.zeros` in `__init__`
    core = (
        "import torch\n\n\nclass Stat:\n"
        "    def __init__(self, bins):\n        self.bins = bins\n        self.counts = torch.zeros(bins)\n"
    )
    hist = (
        "import torch\n\nfrom stats.core import Stat\n\n\nclass Histogram(Stat):\n"
        "    def add(self, values):\n"
        "        self.counts += torch.histc(values, bins=self.bins, min=0, max=1)\n"
    )
    loop = (
        "import torch\n\nfrom stats.hist import Histogram\n\n\n"
        "def watch(model, loader):\n"
        "    hist = Histogram(20)\n"
        "    for x in loader:\n"
        "        probs = model(x.to('cuda')).softmax(-1)\n"
        "        hist.add(probs)\n"
        "    return hist\n"
    )
    files = {"stats/__init__.py": "", "stats/core.py": core, "stats/hist.py": hist}
    _write(tmp_path, {**files, "loop.py": loop})
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL101"]
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("loop.py", 10)]
    assert "(`self.counts`, stats/hist.py:8)" in rows[0]["message"], rows[0]["message"]
    # the base builds it on a device it is handed
    placed = core.replace("    def __init__(self, bins):", "    def __init__(self, bins, device='cuda'):").replace(
        "torch.zeros(bins)", "torch.zeros(bins, device=device)"
    )
    _write(tmp_path, {"stats/core.py": placed})
    assert [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL101"] == []


def test_a_host_read_under_a_tensor_type_test_in_an_imported_helper_runs_every_step(tmp_path: Path) -> None:
    # `scalar` reads `.item()` only when it is handed a tensor, which the loop does every step
    helpers = (
        "import numpy as np\nimport torch\n\n\n"
        "def scalar(x):\n    return x.item() if isinstance(x, torch.Tensor) else x\n\n\n"
        "def mean_of(x):\n    if isinstance(x, np.ndarray):\n        return float(x.mean())\n    return x\n"
    )
    loop = (
        "import torch\n\nfrom helpers import {name}\n\n\n"
        "def train(model, loader, optimizer):\n"
        "    losses = []\n"
        "    for x, y in loader:\n"
        "        loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())\n"
        "        optimizer.zero_grad()\n"
        "        loss.backward()\n"
        "        optimizer.step()\n"
        "        losses.append({name}(loss))\n"
        "    return losses\n"
    )
    _write(tmp_path, {"helpers.py": helpers, "loop.py": loop.format(name="scalar")})
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL401"]
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("loop.py", 13)]
    # a test for another type (a NumPy array) keeps the helper's reads its own business
    _write(tmp_path, {"loop.py": loop.format(name="mean_of")})
    assert [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL401"] == []


def test_editing_the_base_class_that_builds_an_accumulator_re_lints_the_feeding_file(tmp_path: Path) -> None:
    # the view of `train.py` reads the subclass's module and its base's: a warm run follows the base
    shutil.copytree(FIXTURES / "projects" / "meter_accumulators_built_by_base_class" / "bad", tmp_path / "p")
    root = tmp_path / "p"
    for path in root.rglob("*.py"):  # (older than the record: no re-read for the racy-timestamp rule)
        os.utime(path, (1_700_000_000, 1_700_000_000))
    assert [r["line"] for r in _check([str(root)]) if r["code"] == "DL101"] == [35, 35]
    base = root / "meters" / "base.py"
    base.write_text(
        base.read_text().replace("torch.zeros(self.num_classes)", "torch.zeros(self.num_classes, device='cuda')")
    )
    assert [r for r in _check([str(root)]) if r["code"] == "DL101"] == []


def test_a_learning_rate_scheduler_stepped_to_a_saved_step_by_another_module_is_no_scaler_step(tmp_path: Path) -> None:
    # `schedule.step(blob["iteration"])` in a resume helper hands a number to a scheduler (a
    # scaler steps an optimizer): the file that builds the scheduler updates no scaler and is
    # not told to. The same module's helper that steps the scaler it is handed still reports its owner
    _write(
        tmp_path,
        {
            "trainer/__init__.py": "",
            "trainer/resume.py": (
                "def reload_state(optimizer, schedule, ckpt_path):\n"
                "    if not ckpt_path:\n        return\n"
                "    blob = read_blob(ckpt_path)\n"
                "    if 'optim' in blob:\n        optimizer.load_state_dict(blob['optim'])\n"
                "    if 'iteration' in blob:\n        schedule.step(blob['iteration'])\n\n\n"
                "def fast_forward(schedule, epochs):\n    schedule.step(epochs + 1)\n\n\n"
                "def replay(optimizer, loss, *, scaler):\n"
                "    scaler.scale(loss).backward()\n    scaler.step(optimizer)\n"
            ),
            "trainer/fit.py": (
                "import torch\n\nfrom trainer.resume import fast_forward, reload_state, replay\n\n\n"
                "def build_optim(net, cfg):\n"
                "    optim = torch.optim.Adam(net.parameters(), lr=cfg.base_lr * cfg.lr_scale)\n"
                "    schedule = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: min(1.0, s / cfg.warmup))\n"
                "    reload_state(optim, schedule, cfg.resume)\n"
                "    fast_forward(schedule, cfg.start_epoch)\n"
                "    return optim, schedule\n\n\n"
                "def fit_amp(net, loader, optim):\n"
                "    loss_scaler = torch.amp.GradScaler('cuda')\n"
                "    for x in loader:\n"
                "        replay(optim, net(x.cuda()).mean(), scaler=loss_scaler)\n"
            ),
        },
    )
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL303"]
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("fit.py", 17)]


def test_a_method_of_an_imported_class_is_judged_at_the_call_on_its_instance(tmp_path: Path) -> None:
    # `plotter = vis.Plotter(...)` then `plotter.show(out)`: the method's `.numpy()` on its
    # argument is the caller's, as for a function; a method that moves it to the host first is not
    _write(
        tmp_path,
        {
            "utils/__init__.py": "",
            "utils/vis.py": (
                "import numpy as np\n\n\n"
                "class Plotter:\n"
                "    def __init__(self, root):\n        self.root = root\n\n"
                "    def show(self, img):\n"
                "        arr = img[0].detach().permute(1, 2, 0).numpy()\n"
                "        np.save(self.root + '/last.npy', arr)\n\n"
                "    def keep(self, img):\n"
                "        arr = img.cpu().numpy()\n"
                "        np.save(self.root + '/kept.npy', arr)\n"
            ),
            "run.py": (
                "import torch\n\nimport utils.vis as vis\n\n\n"
                "def main(loader):\n"
                "    net = torch.nn.Conv2d(3, 3, 1).cuda()\n"
                "    plotter = vis.Plotter('out')\n"
                "    for x in loader:\n"
                "        out = net(x.cuda())\n"
                "        plotter.show(out)\n"
                "        plotter.keep(out)\n"
            ),
        },
    )
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL108"]
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("run.py", 11)]
    assert "vis.Plotter.show" in rows[0]["message"]
    assert [r for r in _check(["--no-cache", "--no-project", str(tmp_path)]) if r["code"] == "DL108"] == []


def test_keyword_arguments_gathered_by_kwargs_and_read_on_the_host(tmp_path: Path) -> None:
    # `log_scalars(step, loss=loss)`: the helper reads each value of `**scalars` with `.item()`,
    # every step; under a logging condition, or with a helper that never reads the values, silent
    helpers = (
        "def log_scalars(step, writer=None, **scalars):\n"
        "    for name, value in scalars.items():\n"
        "        if writer is not None:\n"
        "            writer.add_scalar(name, value.item(), step)\n\n\n"
        "def remember(step, **scalars):\n"
        "    return {'step': step, **{k: v.detach() for k, v in scalars.items()}}\n"
    )
    loop = (
        "import torch\n\nfrom helpers import log_scalars, remember\n\n\n"
        "def fit(model, loader, opt):\n"
        "    model.cuda()\n"
        "    for step, (x, y) in enumerate(loader):\n"
        "        loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())\n"
        "        opt.zero_grad()\n"
        "        loss.backward()\n"
        "        opt.step()\n"
        "        {call}\n"
    )
    _write(tmp_path, {"helpers.py": helpers, "loop.py": loop.format(call="log_scalars(step, loss=loss, lr=0.1)")})
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL401"]
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("loop.py", 13)]
    for quiet in ("remember(step, loss=loss)", "log_scalars(step, lr=0.1)"):
        _write(tmp_path, {"loop.py": loop.format(call=quiet)})
        assert [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL401"] == [], quiet


def test_a_class_method_constructor_of_an_imported_model_is_a_builder(tmp_path: Path) -> None:
    # `Net.from_pretrained(path)` (a classmethod building `cls(...)` and loading its state) and
    # `Net.build(cfg)` (a staticmethod) make the model on the CPU; one that moves it does not
    model = (
        "import torch\nimport torch.nn as nn\n\n\n"
        "class Net(nn.Module):\n"
        "    def __init__(self, dim):\n        super().__init__()\n        self.fc = nn.Linear(dim, 2)\n\n"
        "    @classmethod\n"
        "    def from_pretrained(cls, path, dim=8):\n"
        "        net = cls(dim)\n"
        "        net.load_state_dict(torch.load(path, map_location='cpu'))\n"
        "        return net\n\n"
        "    @staticmethod\n"
        "    def build(cfg):\n        return Net(cfg['dim'])\n\n"
        "    def forward(self, x):\n        return self.fc(x)\n\n\n"
        "class Placed(Net):\n"
        "    @classmethod\n"
        "    def on(cls, device, dim=8):\n        return cls(dim).to(device)\n"
    )
    script = (
        "import torch\n\nfrom nets import Net, Placed\n\n\n"
        "def predict(path, xs):\n"
        "    net = {built}\n"
        "    net.eval()\n"
        "    for x in xs:\n"
        "        print(net(x.to('cuda')))\n"
    )
    _write(tmp_path, {"nets.py": model, "predict.py": script.format(built="Net.from_pretrained(path)")})
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL117"]
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("predict.py", 10)]
    _write(tmp_path, {"predict.py": script.format(built="Net.build({'dim': 8})")})
    assert [r["line"] for r in [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL117"]] == [10]
    _write(tmp_path, {"predict.py": script.format(built="Placed.on('cuda')")})
    assert [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL117"] == []


def test_a_wrapper_returned_by_an_imported_helper_hides_the_model_attributes(tmp_path: Path) -> None:
    # `net = wrap_ddp(net, rank)` of a helper whose every return is a DDP wrapper it makes: reading
    # `net.encoder` through it is DL203's; a helper that wraps only under a condition is not followed
    helpers = (
        "import torch.nn as nn\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\n\n"
        "def wrap_ddp(model, rank):\n"
        "    wrapped = DDP(model.to(rank), device_ids=[rank])\n"
        "    return wrapped\n\n\n"
        "def maybe_parallel(model, n_gpus):\n"
        "    if n_gpus > 1:\n        model = nn.DataParallel(model)\n"
        "    return model\n"
    )
    script = (
        "from dist import maybe_parallel, wrap_ddp\n\n\n"
        "def run(net, rank, batch):\n"
        "    net = {wrap}\n"
        "    feats = net.encoder(batch)\n"
        "    return net(feats)\n"
    )
    _write(tmp_path, {"dist.py": helpers, "run.py": script.format(wrap="wrap_ddp(net, rank)")})
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL203"]
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("run.py", 6)]
    assert "wrap_ddp" in rows[0]["message"]
    _write(tmp_path, {"run.py": script.format(wrap="maybe_parallel(net, 2)")})
    assert [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL203"] == []


def test_a_gpu_index_option_parsed_by_a_function_of_another_module(tmp_path: Path) -> None:
    # `args = get_args()` of a package module whose parser adds `--device-id` (int): a bare
    # `.to("cuda")` in the script ignores it; a parse function that selects the device itself does not
    parser = (
        "import argparse\n\nimport torch\n\n\n"
        "def get_args():\n"
        "    p = argparse.ArgumentParser()\n"
        "    p.add_argument('--device-id', type=int, default=0)\n"
        "    p.add_argument('--steps', type=int, default=10)\n"
        "    args = p.parse_args()\n"
        "{select}"
        "    return args\n"
    )
    script = (
        "import torch\n\nfrom config.args import get_args\n\n\n"
        "def main():\n"
        "    args = get_args()\n"
        "    print('device', args.device_id)\n"
        "    x = torch.randn(4, 4).to('cuda')\n"
        "    for _ in range(args.steps):\n"
        "        x = x @ x\n"
    )
    files = {"config/__init__.py": "", "config/args.py": parser.format(select=""), "main.py": script}
    _write(tmp_path, files)
    rows = [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL119"]
    assert [(Path(r["path"]).name, r["line"]) for r in rows] == [("main.py", 9)]
    _write(tmp_path, {"config/args.py": parser.format(select="    torch.cuda.set_device(args.device_id)\n")})
    assert [r for r in _check(["--no-cache", str(tmp_path)]) if r["code"] == "DL119"] == []
