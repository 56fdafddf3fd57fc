"""The generated reference pages (docs/reference/) match the code they are generated from: the
configuration and policy-file references from ``ahp-gateway schema``, the CLI reference from the
argument parser. A stale page fails here with the command that regenerates it."""

from __future__ import annotations

import re

import pytest

from gateway import docs_gen
from tests.support.paths import ROOT


@pytest.mark.parametrize("path", sorted(docs_gen.pages()))
def test_the_committed_reference_page_is_current(path: str) -> None:
    committed = (ROOT / path).read_text() if (ROOT / path).is_file() else ""
    assert committed == docs_gen.pages()[path], f"{path} is stale: run `python -m gateway.docs_gen` and commit it"


def test_check_mode_names_a_stale_page_and_the_command(tmp_path, capsys, monkeypatch) -> None:
    for path, text in docs_gen.pages().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    (tmp_path / "docs/reference/cli.md").write_text("# CLI reference\n")
    monkeypatch.chdir(tmp_path)
    assert docs_gen.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "docs/reference/cli.md is stale: run `python -m gateway.docs_gen`" in err
    assert "configuration.md" not in err


def test_the_configuration_reference_lists_every_key_of_the_schema() -> None:
    import json

    from gateway.schema_cmd import render

    schema = json.loads(render("config"))
    page = (ROOT / "docs/reference/configuration.md").read_text()
    sections = dict(re.findall(r"^## (\w+)\n(.*?)(?=^## |\Z)", page, re.MULTILINE | re.DOTALL))
    for name, definition in [("Top level", schema), *schema["$defs"].items()]:
        body = sections.get(name.split()[0]) if name != "Top level" else page.split("## Top level", 1)[1]
        assert body is not None, f"no section for {name}"
        for key, prop in definition.get("properties", {}).items():
            row = re.search(rf"^\| `{re.escape(key)}` \|(.*)$", body, re.MULTILINE)
            assert row, f"{name}.{key} is not in the configuration reference"
            if "default" in prop:
                assert f"`{json.dumps(prop['default'])}`" in row[1], f"{name}.{key}: default not shown"


def test_the_cli_reference_shows_every_subcommand_and_flag() -> None:
    from gateway.cli import build_parser

    page = (ROOT / "docs/reference/cli.md").read_text()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, child in sub.choices.items():  # type: ignore[union-attr]
        assert f"`ahp-gateway {name}`" in page, name
        for action in child._actions:
            for flag in action.option_strings:
                if action.help != "==SUPPRESS==" and flag not in ("-h", "--help"):
                    assert f"`{flag}`" in page, f"{name} {flag}"


@pytest.mark.parametrize("page", ["docs/reference/configuration.md", "docs/reference/policy-files.md"])
def test_every_key_of_the_reference_has_a_description(page: str) -> None:
    """A key without a description in the models (a field docstring or ``description=``) would
    be an empty cell here: the reference promises every key's meaning."""
    rows = re.findall(r"^\| `([^`]+)` \|.*\|(.*)\|$", (ROOT / page).read_text(), re.MULTILINE)
    assert rows
    assert [key for key, description in rows if not description.strip()] == []
