"""rock-nomad calls Nomad's API over mutual TLS (issue #22 point 8), as a multi-host cluster
with ``tls { http = true, verify_https_client = true }`` asks: Nomad's certificate is checked
against ``ca_cert`` (``NOMAD_CACERT``), and ``client_cert``/``client_key``
(``NOMAD_CLIENT_CERT``/``NOMAD_CLIENT_KEY``) are shown when Nomad asks for one.

The stand-in serves its API over HTTPS with certificates of a throwaway CA made here, and asks
for a client certificate signed by it. A wrong CA, a missing or foreign client certificate and
an unreadable file each fail with an error naming the setting to fix.
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from rock_core.actions import Command, SandboxStartRequest
from rock_core.errors import RuntimeFailure
from rock_core.states import State
from rock_nomad.runtime import NomadRuntime
from rock_nomad.testing.fixtures import stand_in_nomad_factory  # noqa: F401 - fixture

from .conftest import IMAGE

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

SMALL = {"image": IMAGE, "memory": "256m", "cpus": 0.5, "disk": None}
MAKE_TEST_CA = Path(__file__).resolve().parents[3] / "deploy" / "nomad" / "make-test-ca.sh"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class ThrowawayCa:
    """A CA made for one test, which signs server and client certificates as
    deploy/nomad/make-test-ca.sh does (files in ``folder``)."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder = folder
        self.name = name
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} test CA")])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )
        self.path = self._write(
            f"{name}-ca.pem", self.cert.public_bytes(serialization.Encoding.PEM)
        )

    def _write(self, file: str, data: bytes) -> str:
        path = self.folder / file
        path.write_bytes(data)
        path.chmod(0o600)
        return str(path)

    def issue(self, common_name: str, *, server: bool) -> tuple[str, str]:
        """``(certificate file, key file)`` for ``common_name`` (a server's also names 127.0.0.1)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        names: list[x509.GeneralName] = [x509.DNSName(common_name), x509.DNSName("localhost")]
        if server:
            names.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        stem = f"{self.name}-{common_name}"
        return (
            self._write(f"{stem}.pem", cert.public_bytes(serialization.Encoding.PEM)),
            self._write(
                f"{stem}-key.pem",
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                ),
            ),
        )


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, object]:
    """The cluster's CA, Nomad's server certificate, rock's client certificate, and a stranger's."""
    ca = ThrowawayCa(tmp_path, "cluster")
    stranger = ThrowawayCa(tmp_path, "stranger")
    return {
        "ca": ca.path,
        "server": ca.issue("server.global.nomad", server=True),
        "client": ca.issue("rock-admin.global.nomad", server=False),
        "stranger_ca": stranger.path,
        "stranger_client": stranger.issue("rock-admin.global.nomad", server=False),
    }


async def _list(address: str, **settings: object) -> object:
    async with NomadRuntime(address=address, api_timeout=10, **settings) as runtime:
        return await runtime.list({})


async def test_sandboxes_start_through_nomads_api_over_mutual_tls(
    stand_in_nomad_factory, engine_on, pki
) -> None:  # noqa: F811
    nomad = stand_in_nomad_factory(nodes=1, tls=pki["server"], tls_client_ca=pki["ca"])
    assert nomad.address.startswith("https://127.0.0.1:")
    # The API speaks TLS only: plain HTTP gets no answer.
    with pytest.raises(httpx.TransportError):
        httpx.get(nomad.address.replace("https://", "http://") + "/v1/jobs", timeout=10)
    cert, key = pki["client"]
    async with engine_on(nomad, ca_cert=pki["ca"], client_cert=cert, client_key=key) as engine:
        status = await engine.start(SandboxStartRequest(**SMALL))
        assert status.state is State.RUNNING
        result = await engine.rocklet(status.sandbox_id).execute(
            Command(command=["echo", "over tls"])
        )
        assert result.stdout.strip() == "over tls"
        await engine.stop(status.sandbox_id)


async def test_the_tls_settings_come_from_nomads_environment_variables(
    stand_in_nomad_factory, pki, monkeypatch
) -> None:  # noqa: F811
    nomad = stand_in_nomad_factory(nodes=1, tls=pki["server"], tls_client_ca=pki["ca"])
    cert, key = pki["client"]
    monkeypatch.setenv("NOMAD_CACERT", pki["ca"])
    monkeypatch.setenv("NOMAD_CLIENT_CERT", cert)
    monkeypatch.setenv("NOMAD_CLIENT_KEY", key)
    assert await _list(nomad.address) == []


async def test_each_tls_mistake_names_the_setting_to_fix(
    stand_in_nomad_factory, pki, monkeypatch
) -> None:  # noqa: F811
    for name in ("NOMAD_CACERT", "NOMAD_CLIENT_CERT", "NOMAD_CLIENT_KEY"):
        monkeypatch.delenv(name, raising=False)
    nomad = stand_in_nomad_factory(nodes=1, tls=pki["server"], tls_client_ca=pki["ca"])
    cert, key = pki["client"]
    # Nomad's certificate checked against the system's CAs, or another CA: not trusted.
    for ca in (None, pki["stranger_ca"]):
        with pytest.raises(
            RuntimeFailure, match=r"certificate verify failed.*check plugins\.nomad\.ca_cert"
        ):
            await _list(nomad.address, ca_cert=ca, client_cert=cert, client_key=key)
    # No client certificate, or one Nomad's CA did not sign: refused by Nomad.
    with pytest.raises(RuntimeFailure, match=r"check plugins\.nomad\.client_cert .*and client_key"):
        await _list(nomad.address, ca_cert=pki["ca"])
    stranger_cert, stranger_key = pki["stranger_client"]
    with pytest.raises(RuntimeFailure, match=r"check plugins\.nomad\.client_cert .*and client_key"):
        await _list(
            nomad.address, ca_cert=pki["ca"], client_cert=stranger_cert, client_key=stranger_key
        )
    # A file that is not there.
    with pytest.raises(RuntimeFailure, match=r"plugins\.nomad\.ca_cert .*/no/such/ca\.pem"):
        await _list(nomad.address, ca_cert="/no/such/ca.pem")
    monkeypatch.setenv("NOMAD_CLIENT_CERT", "/no/such/client.pem")
    monkeypatch.setenv("NOMAD_CLIENT_KEY", key)
    with pytest.raises(
        RuntimeFailure, match=r"plugins\.nomad\.client_cert \(taken from NOMAD_CLIENT_CERT\)"
    ) as caught:
        await _list(nomad.address, ca_cert=pki["ca"])
    assert "/no/such/client.pem" in str(caught.value)


async def test_the_certificates_deploy_nomad_makes_work_for_nomad_and_the_admin(
    stand_in_nomad_factory, tmp_path
) -> None:  # noqa: F811
    """deploy/nomad/make-test-ca.sh (openssl): Nomad's server certificate serves the API, the
    admin's client certificate is accepted, the CLI's too, and every key is 0600."""
    assert shutil.which("openssl"), "make-test-ca.sh needs openssl"
    tls = tmp_path / "tls"
    subprocess.run(
        ["sh", str(MAKE_TEST_CA), str(tls), "nomad1.example,192.0.2.11"],
        check=True,
        capture_output=True,
    )
    nomad = stand_in_nomad_factory(
        nodes=1,
        tls=(str(tls / "global-server-nomad.pem"), str(tls / "global-server-nomad-key.pem")),
        tls_client_ca=str(tls / "nomad-agent-ca.pem"),
    )
    for who in ("rock-admin", "global-cli-nomad"):
        assert (
            await _list(
                nomad.address,
                ca_cert=str(tls / "nomad-agent-ca.pem"),
                client_cert=str(tls / f"{who}.pem"),
                client_key=str(tls / f"{who}-key.pem"),
            )
            == []
        )
    keys = sorted(tls.glob("*-key.pem"))
    assert len(keys) == 5 and all(key.stat().st_mode & 0o777 == 0o600 for key in keys)
