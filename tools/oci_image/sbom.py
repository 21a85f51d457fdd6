"""The image's package list as an SPDX 2.3 document: every Debian package dpkg installed and
every wheel pip installed, each with its package URL (purl), so scanners (grype, trivy) match
them against Debian's and PyPI's advisories."""

from __future__ import annotations

import email.parser
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

SPDX_VERSION = "SPDX-2.3"
DEBIAN_RELEASES = {"bookworm": "12", "trixie": "13", "forky": "14"}


@dataclass(frozen=True)
class Component:
    name: str
    version: str
    purl: str
    supplier: str
    source: str = ""
    license: str = "NOASSERTION"


def _stanzas(text: str) -> list[dict[str, str]]:
    stanzas = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = None
        for line in block.splitlines():
            if line[:1] in (" ", "\t") and key:
                continue  # a continuation line (descriptions, conffiles)
            key, _, value = line.partition(":")
            fields[key] = value.strip()
        if fields.get("Package"):
            stanzas.append(fields)
    return stanzas


def debian_packages(root: Path, suite: str) -> list[Component]:
    status = (root / "var/lib/dpkg/status").read_text(encoding="utf-8")
    distro = f"debian-{DEBIAN_RELEASES.get(suite, suite)}"
    found = []
    for fields in _stanzas(status):
        if not fields.get("Status", "").endswith(" installed"):
            continue
        name, version, arch = fields["Package"], fields["Version"], fields["Architecture"]
        source = fields.get("Source", name).split(" ")[0]
        qualifiers = f"arch={arch}&distro={distro}"
        if source != name:
            qualifiers += f"&upstream={quote(source)}"
        found.append(
            Component(
                name,
                version,
                f"pkg:deb/debian/{name}@{quote(version)}?{qualifiers}",
                f"Organization: {fields.get('Maintainer', 'Debian')}",
                source,
            )
        )
    return sorted(found, key=lambda component: component.name)


def wheels(folder: Path) -> list[Component]:
    found = []
    for metadata in sorted(folder.glob("*.dist-info/METADATA")):
        headers = email.parser.Parser().parsestr(metadata.read_text(encoding="utf-8"))
        name, version = headers["Name"], headers["Version"]
        found.append(
            Component(
                name,
                version,
                f"pkg:pypi/{re.sub(r'[-_.]+', '-', name).lower()}@{version}",
                f"Organization: {headers.get('Author') or headers.get('Author-email') or name}",
                license=_spdx_license(headers.get("License-Expression") or ""),
            )
        )
    return found


def _spdx_license(expression: str) -> str:
    return expression if re.fullmatch(r"[A-Za-z0-9.+ ()-]+", expression or "-") else "NOASSERTION"


def _spdx_id(component: Component, kind: str) -> str:
    return "SPDXRef-" + re.sub(r"[^A-Za-z0-9.-]", "-", f"{kind}-{component.name}")


def document(
    image: str, version: str, created: str, namespace: str, components: list[tuple[str, Component]]
) -> dict:
    """``components``: (kind, component) with kind 'deb' or 'pypi'."""
    described = {
        "SPDXID": "SPDXRef-image",
        "name": image,
        "versionInfo": version,
        "downloadLocation": "NOASSERTION",
        "filesAnalyzed": False,
        "primaryPackagePurpose": "CONTAINER",
        "licenseConcluded": "NOASSERTION",
        "licenseDeclared": "NOASSERTION",
        "copyrightText": "NOASSERTION",
    }
    packages = [described]
    relationships = [
        {
            "spdxElementId": "SPDXRef-DOCUMENT",
            "relationshipType": "DESCRIBES",
            "relatedSpdxElement": "SPDXRef-image",
        }
    ]
    for kind, component in components:
        identifier = _spdx_id(component, kind)
        packages.append(
            {
                "SPDXID": identifier,
                "name": component.name,
                "versionInfo": component.version,
                "supplier": component.supplier,
                "downloadLocation": "NOASSERTION",
                "filesAnalyzed": False,
                "licenseConcluded": "NOASSERTION",
                "licenseDeclared": component.license,
                "copyrightText": "NOASSERTION",
                "externalRefs": [
                    {
                        "referenceCategory": "PACKAGE-MANAGER",
                        "referenceType": "purl",
                        "referenceLocator": component.purl,
                    }
                ],
            }
        )
        relationships.append(
            {
                "spdxElementId": "SPDXRef-image",
                "relationshipType": "CONTAINS",
                "relatedSpdxElement": identifier,
            }
        )
    return {
        "spdxVersion": SPDX_VERSION,
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": f"{image} {version}",
        "documentNamespace": namespace,
        "creationInfo": {"created": created, "creators": ["Tool: make image"]},
        "packages": packages,
        "relationships": relationships,
    }
