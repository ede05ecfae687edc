"""certificate_problem: the registry CA check image_security makes on the controller instead of a module call."""
import datetime

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ansible_collections.gpufleet.cluster.plugins.filter.x509 import certificate_problem, certificate_problem_at

NOW = datetime.datetime(2026, 12, 3, 12, 0, tzinfo=datetime.timezone.utc)


def make_ca(not_after, name="registry CA"):
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(not_after - datetime.timedelta(days=365))
            .not_valid_after(not_after).sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM).decode("ascii")


VALID = make_ca(NOW + datetime.timedelta(days=30))
EXPIRED = make_ca(NOW - datetime.timedelta(days=1))


def test_a_valid_certificate_has_no_problem():
    assert certificate_problem_at(VALID, now=NOW) == ""
    assert certificate_problem_at("\n" + VALID + "\n" + VALID, now=NOW) == ""


def test_an_expired_certificate_names_the_date():
    problem = certificate_problem_at(EXPIRED, now=NOW)
    assert problem.startswith("expired on 2026-12-02")


def test_every_certificate_of_a_bundle_is_checked():
    assert certificate_problem_at(VALID + EXPIRED, now=NOW).startswith("certificate 2 of 2 expired on")


def test_a_block_that_does_not_parse():
    broken = VALID.replace(VALID.splitlines()[3], "A" * len(VALID.splitlines()[3]))
    assert certificate_problem_at(broken, now=NOW).startswith("does not parse")


def test_text_without_a_certificate():
    assert certificate_problem_at("", now=NOW) == "it holds no PEM certificate"
    assert certificate_problem_at("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", now=NOW) \
        == "it holds no PEM certificate"


def test_the_default_clock_is_now():
    today = datetime.datetime.now(datetime.timezone.utc)
    assert certificate_problem(make_ca(today + datetime.timedelta(days=1))) == ""
    assert certificate_problem(make_ca(today - datetime.timedelta(days=1))).startswith("expired on")
