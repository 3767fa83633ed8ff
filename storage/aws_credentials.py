"""The AWS shared credentials file, the second link of the standard credential chain.

An S3 client looks for credentials in this order (as the AWS SDKs and CLI do): the options it was given,
the environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``), the shared
credentials file, and last the instance's role (the object-store client asks the metadata service).
`storage.objstore_config.s3_config` takes the first two itself and this module's `shared_file_credentials` for
the third when neither gave a key. The file is ``AWS_SHARED_CREDENTIALS_FILE``, else
``~/.aws/credentials``, an INI file of profiles; the profile is ``AWS_PROFILE``, else ``default``::

    [default]
    aws_access_key_id = AKIA...
    aws_secret_access_key = ...
    aws_session_token = ...        (optional)

It is what gives a Spark executor on a cluster node its credentials without a secret on any command line
or in any task (docs/spark.md, "Credentials"): the file sits on the node, readable by its owner only,
and at most its path travels (``spark.executorEnv.AWS_SHARED_CREDENTIALS_FILE``). No error message of
this module quotes the file's content.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping

from formats.errors import LsmError

# the file's keys -> obstore's S3 config keys
FILE_KEYS = {
    "aws_access_key_id": "access_key_id",
    "aws_secret_access_key": "secret_access_key",
    "aws_session_token": "token",
}


class CredentialsFileError(LsmError):
    """The AWS shared credentials file named (or its profile) cannot be used; the message never holds a
    secret of it."""


def credentials_file(environ: Mapping[str, str] | None = None) -> tuple[str, bool]:
    """(path of the shared credentials file, whether ``AWS_SHARED_CREDENTIALS_FILE`` named it)."""
    env = os.environ if environ is None else environ
    named = env.get("AWS_SHARED_CREDENTIALS_FILE")
    if named:
        return os.path.expanduser(named), True
    return os.path.join(os.path.expanduser("~"), ".aws", "credentials"), False


def shared_file_credentials(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The key id, secret and session token of the profile in the shared credentials file, as obstore
    config; {} when there is no file (at the default place) or it has no such profile (the default one).
    CredentialsFileError for a file ``AWS_SHARED_CREDENTIALS_FILE`` names that does not exist, a profile
    ``AWS_PROFILE`` names that it lacks, a file that is not INI, or a key id without a secret."""
    env = os.environ if environ is None else environ
    path, named = credentials_file(env)
    profile = env.get("AWS_PROFILE") or "default"
    if not os.path.isfile(path):
        if named:
            raise CredentialsFileError(f"AWS_SHARED_CREDENTIALS_FILE={path}: no such file")
        return {}
    parser = configparser.ConfigParser(interpolation=None)
    try:
        with open(path, encoding="utf-8") as f:
            parser.read_file(f)
    except configparser.Error as e:
        line = getattr(e, "lineno", None) or next((n for n, _ in getattr(e, "errors", ())), None)
        where = f" (line {line})" if line else ""
        raise CredentialsFileError(
            f"{path}: not an AWS credentials file{where}: sections of 'key = value' lines"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise CredentialsFileError(
            f"{path}: cannot read the AWS credentials file: {type(e).__name__}"
        ) from None
    if not parser.has_section(profile):
        if env.get("AWS_PROFILE"):
            raise CredentialsFileError(f"{path}: no profile [{profile}] (AWS_PROFILE)")
        return {}
    section = parser[profile]
    out = {key: section[name].strip() for name, key in FILE_KEYS.items() if section.get(name, "").strip()}
    if ("access_key_id" in out) != ("secret_access_key" in out):
        raise CredentialsFileError(
            f"{path}: profile [{profile}] needs both aws_access_key_id and aws_secret_access_key"
        )
    return out


__all__ = ["FILE_KEYS", "CredentialsFileError", "credentials_file", "shared_file_credentials"]
