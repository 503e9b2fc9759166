"""Certificates for the local cluster, made with the openssl CLI.

One CA signs: the API server's serving certificate (localhost, 127.0.0.1 and
the in-cluster `kubernetes` names), one client certificate per component
identity (so RBAC sees the real `system:kube-controller-manager` and
`system:kube-scheduler` users, not cluster-admin everywhere), and the admin
user in `system:masters`. A separate RSA key pair signs ServiceAccount tokens.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

#: The first address of the service CIDR is the `kubernetes` Service's ClusterIP.
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"


@dataclass(frozen=True)
class ClientIdentity:
    """A client certificate's subject: user name (CN) and groups (O)."""

    file_stem: str
    user: str
    groups: tuple[str, ...] = ()


CLIENTS: tuple[ClientIdentity, ...] = (
    ClientIdentity("admin", "tailpilot-admin", ("system:masters",)),
    ClientIdentity("controller-manager", "system:kube-controller-manager"),
    ClientIdentity("scheduler", "system:kube-scheduler"),
    # KWOK plays every kubelet of the fleet; it needs node and pod status writes on all of them.
    ClientIdentity("kwok", "kwok-controller", ("system:masters",)),
)


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args[:2])} failed: {result.stderr.strip()}")


def _subject(identity: ClientIdentity) -> str:
    return "".join(f"/O={group}" for group in identity.groups) + f"/CN={identity.user}"


def ensure_pki(pki_dir: Path) -> None:
    """Create every key and certificate that is missing (idempotent)."""
    pki_dir.mkdir(parents=True, exist_ok=True)
    if not (pki_dir / "ca.crt").exists():
        _openssl("genrsa", "-out", "ca.key", "2048", cwd=pki_dir)
        _openssl(
            "req",
            "-x509",
            "-new",
            "-nodes",
            "-key",
            "ca.key",
            "-days",
            "3650",
            "-subj",
            "/CN=tailpilot-local-ca",
            "-out",
            "ca.crt",
            cwd=pki_dir,
        )
    if not (pki_dir / "sa.key").exists():
        _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki_dir)
        _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki_dir)
    if not (pki_dir / "apiserver.crt").exists():
        sans = ",".join(
            [
                "DNS:localhost",
                "DNS:kubernetes",
                "DNS:kubernetes.default",
                "DNS:kubernetes.default.svc",
                "DNS:kubernetes.default.svc.cluster.local",
                "IP:127.0.0.1",
                f"IP:{KUBERNETES_SERVICE_IP}",
            ]
        )
        _sign(
            pki_dir,
            "apiserver",
            "/CN=kube-apiserver",
            extensions=[
                f"subjectAltName={sans}",
                "extendedKeyUsage=serverAuth",
                "keyUsage=digitalSignature,keyEncipherment",
            ],
        )
    for identity in CLIENTS:
        if not (pki_dir / f"{identity.file_stem}.crt").exists():
            _sign(
                pki_dir,
                identity.file_stem,
                _subject(identity),
                extensions=[
                    "extendedKeyUsage=clientAuth",
                    "keyUsage=digitalSignature,keyEncipherment",
                ],
            )


def localhost_server_certificate(pki_dir: Path, stem: str) -> tuple[Path, Path]:
    """A serving certificate and key for 127.0.0.1 and localhost signed by the CA of `pki_dir`.

    For the test servers on this machine a build fetches from over TLS (an object store, a
    registry): the CA is what a spec names as its private CA. Made once (idempotent).
    """
    ensure_pki(pki_dir)
    if not (pki_dir / f"{stem}.crt").exists():
        _sign(
            pki_dir,
            stem,
            f"/CN=tailpilot-{stem}",
            extensions=[
                "subjectAltName=IP:127.0.0.1,DNS:localhost",
                "extendedKeyUsage=serverAuth",
                "keyUsage=digitalSignature,keyEncipherment",
            ],
        )
    return pki_dir / f"{stem}.crt", pki_dir / f"{stem}.key"


def _sign(pki_dir: Path, stem: str, subject: str, *, extensions: list[str]) -> None:
    _openssl("genrsa", "-out", f"{stem}.key", "2048", cwd=pki_dir)
    _openssl("req", "-new", "-key", f"{stem}.key", "-subj", subject, "-out", f"{stem}.csr", cwd=pki_dir)
    ext_file = pki_dir / f"{stem}.ext"
    ext_file.write_text("\n".join(extensions) + "\n")
    _openssl(
        "x509",
        "-req",
        "-in",
        f"{stem}.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "3650",
        "-extfile",
        ext_file.name,
        "-out",
        f"{stem}.crt",
        cwd=pki_dir,
    )
    (pki_dir / f"{stem}.csr").unlink()
    ext_file.unlink()
