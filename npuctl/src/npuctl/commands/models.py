"""npuctl models list | fetch | verify"""

from __future__ import annotations

import click

from ..errors import ExitCode, ModelError
from ..families import chosen
from ..models.download import fetch as fetch_entry
from ..models.store import Lock, verify
from ..output import emit_json, table
from ..params import JSON_OUTPUT
from ..settings import Settings, pass_settings
from ..system import System


@click.group()
def models() -> None:
    """Manage the models npuctl knows by name."""


@models.command(name="list")
@JSON_OUTPUT
@pass_settings
def list_models(settings: Settings, as_json: bool) -> None:
    """Known models and files, where they are and whether they are pinned."""
    directory = settings.models_dir
    lock = Lock.load(directory)
    rows = []
    for entry in settings.manifest.entries.values():
        present = (directory / entry.file).exists()
        pinned = (
            "published"
            if entry.sha256
            else "recorded"
            if lock.expected_sha256(entry)
            else "unpinned"
        )
        rows.append(
            {
                "name": entry.name,
                "kind": entry.kind,
                "platform": entry.platform,
                "file": str(directory / entry.file),
                "present": present,
                "checksum": pinned,
                "url": entry.url,
                "description": entry.description,
            }
        )
    if as_json:
        emit_json({"models_dir": str(directory), "entries": rows})
        return
    click.echo(f"model directory: {directory}")
    click.echo(
        table(
            ["name", "kind", "platform", "present", "checksum", "description"],
            [
                [
                    r["name"],
                    r["kind"],
                    r["platform"] or "",
                    "yes" if r["present"] else "no",
                    r["checksum"],
                    r["description"],
                ]
                for r in rows
            ],
        )
    )


@models.command()
@click.argument("names", nargs=-1)
@JSON_OUTPUT
@pass_settings
def fetch(settings: Settings, names: tuple[str, ...], as_json: bool) -> None:
    """Download models (default: this machine's NPU family's, or all) and the files they
    need; resumable."""
    directory = settings.models_dir
    lock = Lock.load(directory)
    platform = chosen(System(), settings.platform)
    defaults = settings.manifest.models_of(platform.name if platform else None)
    entries = settings.manifest.with_needs(list(names) or [e.name for e in defaults])
    results = []
    for entry in entries:
        done = fetch_entry(entry, directory, lock, progress=not as_json)
        results.append(
            {
                "name": entry.name,
                "path": str(done.path),
                "state": done.state,
                "sha256": done.sha256,
                "pinned_now": done.pinned_now,
            }
        )
        if not as_json:
            note = " (unpinned: checksum recorded in the lock file)" if done.pinned_now else ""
            click.echo(f"{entry.name}: {done.state} {done.path}{note}")
    if as_json:
        emit_json({"models_dir": str(directory), "fetched": results})


@models.command(name="verify")
@click.argument("names", nargs=-1)
@JSON_OUTPUT
@pass_settings
def verify_models(settings: Settings, names: tuple[str, ...], as_json: bool) -> None:
    """Check present files: not empty, not Git LFS pointers, checksums."""
    directory = settings.models_dir
    lock = Lock.load(directory)
    entries = [settings.manifest.get(name) for name in names] or list(
        settings.manifest.entries.values()
    )
    checks = [verify(entry, directory, lock) for entry in entries]
    if as_json:
        emit_json(
            {
                "models_dir": str(directory),
                "checks": [
                    {
                        "name": c.entry.name,
                        "path": str(c.path),
                        "state": c.state,
                        "detail": c.detail,
                        "sha256": c.sha256,
                    }
                    for c in checks
                ],
            }
        )
    else:
        click.echo(
            table(["name", "state", "detail"], [[c.entry.name, c.state, c.detail] for c in checks])
        )
    bad = [c for c in checks if c.state in ("invalid", "mismatch")]
    missing = [c for c in checks if c.state == "missing"]
    if bad or (missing and names):
        raise ModelError(f"{len(bad) + len(missing)} file(s) failed verification", ExitCode.MODEL)
    if len(missing) == len(checks):
        raise ModelError(
            "no model is downloaded, nothing was verified: run 'npuctl models fetch'",
            ExitCode.MODEL,
        )
