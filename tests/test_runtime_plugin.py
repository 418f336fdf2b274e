"""The pytest plugin (`@pytest.mark.devicelint`, `--devicelint-runtime`, the `devicelint` fixture),
run in-process through pytester on the example under fixtures/runtime_example."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")

from conftest import FIXTURES  # noqa: E402

pytest_plugins = ("pytester",)

EXAMPLE = FIXTURES / "runtime_example"
# pytester's in-process runs drop modules imported during them; torch's lazily imported
# compiler modules must not be imported twice, so load them before any run.
import torch._dynamo  # noqa: E402, F401, F811

# The report the plugin writes imports the formats and the rules: load them once too, or a
# run would drop them and their second import would register every rule again.
import devicelint.checks  # noqa: E402, F401
import devicelint.report.github  # noqa: E402, F401
import devicelint.report.gitlab  # noqa: E402, F401
import devicelint.report.json_lines  # noqa: E402, F401
import devicelint.report.junit  # noqa: E402, F401
import devicelint.report.pylint_format  # noqa: E402, F401
import devicelint.report.sarif  # noqa: E402, F401
import devicelint.report.text  # noqa: E402, F401
import devicelint.runtime.checker  # noqa: E402, F401  (one copy of the checker's modules)

if not torch.cuda.is_available():
    from devicelint.runtime import simulate

    simulate.install()


def _copy_example(pytester: pytest.Pytester) -> None:
    for name in ("planted_model.py", "fixed_model.py", "test_example.py"):
        (pytester.path / name).write_text((EXAMPLE / name).read_text())


def test_example_planted_fails_with_every_bug_and_fixed_passes(pytester: pytest.Pytester) -> None:
    _copy_example(pytester)
    result = pytester.runpytest("-p", "no:cacheprovider", "-W", "ignore::UserWarning")
    result.assert_outcomes(passed=1, failed=1)
    output = result.stdout.str()
    assert "FAILED test_example.py::test_planted_model_trains_on_gpu" in output
    assert "devicelint runtime: 5 finding(s)" in output
    planted = (EXAMPLE / "planted_model.py").read_text().splitlines()
    for number, text in enumerate(planted, start=1):
        match = re.search(r"# planted: (DL6\d\d)", text)
        if match:
            assert re.search(rf"planted_model\.py:{number}:\d+: {match.group(1)} ", output), (number, output)
    assert "[module `TinyGPT.blocks.0.attn`]" in output and "[module `TinyGPT.blocks.0.mlp`]" in output
    # The failure is the findings, not the plugin's hook code.
    assert "pytest_plugin.py" not in output and "def pytest_runtest_call" not in output


def test_sync_warnings_are_shown_at_the_tests_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_syncing="""
        import torch

        def test_syncs(devicelint):
            x = torch.ones(2, device="cuda")
            for _ in range(3):
                x.sum().item()
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    output = result.stdout.str()
    assert "test_syncing.py:6: DeviceWarning: DL602 `.item()`" in output
    assert "pytest_plugin.py" not in output


def test_flag_fixture_and_options(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_flags="""
        import torch

        def test_unmarked_pays_nothing():
            from devicelint.runtime import checker
            assert checker._active is None

        def test_fixture_turns_it_on(devicelint):
            x = torch.ones(2, device="cuda")
            assert x.device == devicelint.device
            assert devicelint.simulated == (devicelint.device.type == "vgpu")
            assert torch.cuda.is_available()  # as on a GPU, simulated or not

        def test_syncs_each_step():
            x = torch.ones(2, device="cuda")
            for _ in range(3):
                x.sum().item()

        def test_mixed():
            torch.ones(2, device="cuda") + torch.ones(2)
        """
    )
    plain = pytester.runpytest("-p", "no:cacheprovider", "-W", "ignore::UserWarning", "-k", "unmarked or fixture")
    plain.assert_outcomes(passed=2)
    flagged = pytester.runpytest(
        "-p", "no:cacheprovider", "-W", "ignore::UserWarning", "--devicelint-runtime", "-k", "not unmarked"
    )
    flagged.assert_outcomes(passed=2, failed=1)
    source = (pytester.path / "test_flags.py").read_text().splitlines()
    mixed_line = next(n for n, text in enumerate(source, 1) if "+ torch.ones(2)" in text)
    assert f"test_flags.py:{mixed_line}:5: DL601 `aten.add` mixed" in flagged.stdout.str()
    strict = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "-W",
        "ignore::UserWarning",
        "--devicelint-runtime",
        "--devicelint-syncs=error",
        "-k",
        "syncs",
    )
    strict.assert_outcomes(failed=1)
    assert "DL602" in strict.stdout.str()


def test_marker_options_are_checked(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_marks="""
        import pytest
        import torch

        @pytest.mark.devicelint(syncs="ignore")
        def test_ignored():
            x = torch.ones(2, device="cuda")
            for _ in range(3):
                x.sum().item()

        @pytest.mark.devicelint(colour="blue")
        def test_unknown():
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-W", "ignore::UserWarning")
    result.assert_outcomes(passed=1, errors=1)
    assert "unknown option(s) ['colour']" in result.stdout.str()


def test_without_torch_checked_tests_fail_clearly_and_others_pass(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = pytester.mkdir("no_torch")
    (blocker / "torch").mkdir()
    (blocker / "torch" / "__init__.py").write_text("raise ImportError('torch is not installed')\n")
    pytester.makepyfile(
        test_plain="""
        import pytest

        def test_plain():
            assert True

        @pytest.mark.devicelint
        def test_checked():
            pass
        """
    )
    monkeypatch.setenv("PYTHONPATH", str(blocker))  # `import torch` fails in the child
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    assert "the runtime checks need torch" in result.stdout.str()


def test_runtime_findings_are_written_for_ci(pytester: pytest.Pytester) -> None:
    import json

    jsonschema = pytest.importorskip("jsonschema")

    _copy_example(pytester)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "-W", "ignore::UserWarning", "--devicelint-report", "runtime.sarif"
    )
    result.assert_outcomes(passed=1, failed=1)
    document = json.loads((pytester.path / "runtime.sarif").read_text())
    schema = json.loads((FIXTURES.parent / "tests" / "data" / "sarif-schema-2.1.0.json").read_text())
    jsonschema.validate(document, schema)
    results = document["runs"][0]["results"]
    assert len(results) == 5 and {r["ruleId"] for r in results} <= {f"DL60{i}" for i in range(1, 7)}
    assert all(
        r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("planted_model.py") for r in results
    )
    json_run = pytester.runpytest(
        "-p", "no:cacheprovider", "-W", "ignore::UserWarning", "--devicelint-report", "runtime.json"
    )
    json_run.assert_outcomes(passed=1, failed=1)
    rows = json.loads((pytester.path / "runtime.json").read_text())
    assert sorted((r["code"], r["line"]) for r in rows) == sorted(
        (r["ruleId"], r["locations"][0]["physicalLocation"]["region"]["startLine"]) for r in results
    )
    github = pytester.runpytest(
        "-p", "no:cacheprovider", "-W", "ignore::UserWarning", "--devicelint-report", "runtime.txt"
    )
    github.assert_outcomes(passed=1, failed=1)
    assert all(line.startswith("::error file=") for line in (pytester.path / "runtime.txt").read_text().splitlines())
