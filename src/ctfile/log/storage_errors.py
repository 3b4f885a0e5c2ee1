"""How an object-store request failed, and the ctfile error a failure becomes.

fsspec filesystems (s3fs, gcsfs, adlfs) raise builtin ``OSError`` subclasses
with the client library's error (botocore's ``ClientError``, an aiohttp
transport error) as the cause, or that error itself. :func:`classify_error`
reads the HTTP status and error code from the whole chain and sorts a failure
into one of four :class:`ErrorKind`\\ s, which decide what
:class:`~ctfile.log.object_store.FsspecStorage` does with it: retry, report a lost
race, report an unknown outcome, or raise
:class:`~ctfile.format.errors.StorageError` (:func:`storage_error`, which
names the table, the operation and the file and says what to check).

Examples
--------
>>> classify_error(FileExistsError("x")).value, classify_error(FileNotFoundError("x")).value
('conflict', 'permanent')
>>> classify_error(TimeoutError()).value, classify_error(PermissionError("denied")).value
('transient', 'permanent')
"""

from __future__ import annotations

import enum
import errno
import os
import stat
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs

from ctfile.format.errors import StorageError
from ctfile.format.paths import LOG_DIR
from ctfile.format.validators import is_int

if TYPE_CHECKING:
    from ctfile.log.storage import Storage


class ErrorKind(str, enum.Enum):
    """How a request failed (SPEC §Table layout, storage requirements)."""

    #: A conditional put lost to an existing object (HTTP 412) or to a
    #: concurrent conditional write (HTTP 409 ``ConditionalRequestConflict``).
    CONFLICT = "conflict"
    #: The server refused the request without acting on it (429, 503 ``SlowDown``).
    THROTTLED = "throttled"
    #: A timeout, dropped connection or server error: the request may have been applied.
    TRANSIENT = "transient"
    #: Anything else (missing object, access denied, bad request ...): not retried.
    PERMANENT = "permanent"


_CONFLICT_CODES = {"PreconditionFailed", "ConditionalRequestConflict", "OperationAborted"}
_THROTTLE_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests",
                   "ServiceUnavailable", "RequestThrottled"}
_TRANSIENT_CODES = {"InternalError", "RequestTimeout", "RequestTimeTooSkewed", "BadGateway", "GatewayTimeout"}
_TRANSIENT_TYPE_NAMES = {
    # botocore / urllib3 / aiohttp transport errors, by name so that no
    # optional dependency has to be imported here.
    "HTTPClientError", "ConnectionError", "EndpointConnectionError", "ConnectionClosedError",
    "ReadTimeoutError", "ConnectTimeoutError", "ProxyConnectionError", "IncompleteReadError",
    "ResponseStreamingError", "ResponseParserError", "IncompleteRead", "ClientPayloadError",
    "ServerDisconnectedError", "ClientConnectionError", "ClientOSError", "ServerTimeoutError",
    "ClientConnectorError", "FSTimeoutError", "ProtocolError", "RemoteDisconnected",
}
#: Client-side errors raised before a request is sent (botocore): nothing
#: can have been written.
_UNSENT_TYPE_NAMES = {
    "NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError", "ParamValidationError",
    "NoRegionError", "UnknownSignatureVersionError", "InvalidEndpointConfigurationError",
}
#: Codes whose message gets a hint of what to check.
_CREDENTIAL_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken",
                     "InvalidClientTokenId", "AuthorizationHeaderMalformed"}


def _chain(exc: BaseException):
    """``exc`` and the exceptions that caused it, each once."""
    seen = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def http_details(exc: BaseException) -> tuple[int | None, str | None]:
    """(HTTP status, error code) from an exception or the chain that caused it."""
    for e in _chain(exc):
        found = _botocore_details(e) or _status_attribute(e)
        if found is not None:
            return found
    return None, None


def _botocore_details(e: BaseException) -> tuple[int | None, str | None] | None:
    """(status, code) of a botocore ``ClientError`` (its ``response`` dict),
    the status read from a numeric code when the response has none; None if
    ``e`` carries neither."""
    response = getattr(e, "response", None)
    if not isinstance(response, dict):
        return None
    status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    code = (response.get("Error") or {}).get("Code")
    if status is None and not code:
        return None
    if status is None and isinstance(code, str) and code.isdigit():
        status = int(code)
    return status, code


def _status_attribute(e: BaseException) -> tuple[int, None] | None:
    """(status, None) from an HTTP status attribute (aiohttp, gcsfs, adlfs style), or None."""
    for attr in ("status", "status_code", "code"):
        v = getattr(e, attr, None)
        if _is_http_status(v):
            return v, None
    return None


def _is_http_status(v: object) -> bool:
    return is_int(v) and 100 <= v <= 599


def _retried_by_client(exc: BaseException) -> bool:
    """True if botocore answered after retrying the request itself (an
    earlier attempt may have failed ambiguously)."""
    for e in _chain(exc):
        response = getattr(e, "response", None)
        if isinstance(response, dict):
            return bool((response.get("ResponseMetadata") or {}).get("RetryAttempts"))
    return False


def classify_error(exc: BaseException) -> ErrorKind:
    """How an object-store request failed (see :class:`ErrorKind`): by the
    server's answer if it tells, else by the exception."""
    if isinstance(exc, FileExistsError):
        return ErrorKind.CONFLICT
    kind = _kind_by_answer(*http_details(exc))
    return kind if kind is not None else _kind_by_exception(exc)


def _kind_by_answer(status: int | None, code: str | None) -> ErrorKind | None:
    """How the server's answer (HTTP ``status``, error ``code``) classifies
    a failure; None without a status and with a code none of the sets names."""
    if _lost_a_race(status, code):
        return ErrorKind.CONFLICT
    if code in _THROTTLE_CODES or status in (429, 503):
        return ErrorKind.THROTTLED
    if code in _TRANSIENT_CODES or _server_failed(status):
        return ErrorKind.TRANSIENT
    return None if status is None else ErrorKind.PERMANENT


def _lost_a_race(status: int | None, code: str | None) -> bool:
    """A conditional put lost: 412, or a 409 that names no other conflict."""
    return code in _CONFLICT_CODES or status == 412 or (status == 409 and code in (None, "409", "Conflict"))


def _server_failed(status: int | None) -> bool:
    """A 5xx, or a request timeout (408): the request may have been applied."""
    return status is not None and (status >= 500 or status == 408)


_MISSING_OR_REFUSED = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
_TRANSIENT_ERRNOS = frozenset({errno.ETIMEDOUT, errno.ECONNRESET, errno.ECONNABORTED, errno.ECONNREFUSED,
                               errno.EPIPE, errno.EBUSY})


def _kind_by_exception(exc: BaseException) -> ErrorKind:
    """How a failure without a server's answer is classified: by the
    exception's type, its causes' and its ``errno``."""
    if isinstance(exc, _MISSING_OR_REFUSED):
        return ErrorKind.PERMANENT
    if isinstance(exc, (TimeoutError, ConnectionError)) or _has_transient_type(exc):
        return ErrorKind.TRANSIENT
    if isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS:
        return ErrorKind.TRANSIENT
    return ErrorKind.PERMANENT


def _has_transient_type(exc: BaseException) -> bool:
    """Whether ``exc`` or a cause is a transport error (:data:`_TRANSIENT_TYPE_NAMES`)."""
    return any(t.__name__ in _TRANSIENT_TYPE_NAMES for e in _chain(exc) for t in type(e).__mro__)


def definite_refusal(exc: BaseException) -> bool:
    """True if the failed request certainly wrote nothing: the server answered
    with a 4xx other than a lost race or throttling, at the first attempt
    (botocore's ``RetryAttempts`` is 0), or the client never sent it (no or
    bad credential configuration, invalid parameters).

    Anything without such evidence may have been applied; a put-if-absent
    that fails so has an unknown outcome (SPEC §Commit protocol, step 7).
    """
    if classify_error(exc) is not ErrorKind.PERMANENT:
        return False
    status, _code = http_details(exc)
    if status is not None:
        return 400 <= status < 500 and not _retried_by_client(exc)
    return any(type(e).__name__ in _UNSENT_TYPE_NAMES for e in _chain(exc))


def is_missing_object(exc: BaseException) -> bool:
    """A read of an object that does not exist (the storage contract's
    :class:`FileNotFoundError`), as opposed to a missing bucket."""
    if not isinstance(exc, FileNotFoundError):
        return False
    _status, code = http_details(exc)
    return code != "NoSuchBucket"


def describe(exc: BaseException) -> str:
    """``HTTP 403, AccessDenied: <message>`` or the exception's repr."""
    status, code = http_details(exc)
    parts = [p for p in (f"HTTP {status}" if status else None, code) if p]
    return f"{', '.join(parts)}: {exc}" if parts else repr(exc)


_CREDENTIAL_TYPE_NAMES = {"NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"}


def _hint(exc: BaseException) -> str:
    """What to check, for the failures whose cause a user can fix; else ""."""
    status, code = http_details(exc)
    names = {t.__name__ for e in _chain(exc) for t in type(e).__mro__}
    if code == "NoSuchBucket":
        return "the bucket does not exist"
    if code in _CREDENTIAL_CODES or names & _CREDENTIAL_TYPE_NAMES:
        return "the credentials are missing or were rejected: check key/secret (or the AWS credential chain)"
    if _access_denied(status, code, names):
        return "access denied: check the credentials and their permissions on this bucket and prefix"
    if status is None and classify_error(exc) is ErrorKind.TRANSIENT:
        return "the endpoint could not be reached: check endpoint_url and the network"
    return ""


def _access_denied(status: int | None, code: str | None, type_names: set[str]) -> bool:
    """A 403, an ``AccessDenied`` code, or a local ``PermissionError`` without an answer."""
    return status == 403 or code == "AccessDenied" or (status is None and "PermissionError" in type_names)


class OutcomeUnknownError(StorageError, OSError):
    """A put-if-absent whose outcome is unknown: the object may or may not
    have been created (a timeout, a dropped connection, a 5xx, an endpoint
    that stopped answering). An :class:`OSError`, which the commit loop
    treats as "keep the data files and retry the same version" (SPEC §Commit
    protocol, step 7), and a :class:`StorageError`, which is what a caller
    sees when the loop gives up (or when ``create_table`` cannot tell whether
    version 0 landed)."""

    def __init__(self, message: str, *, uri: str, path: str | None = None):
        StorageError.__init__(self, message, uri=uri, path=path)
        self.errno = errno.EIO


def storage_error(uri: str, operation: str, path: str | None, exc: BaseException, *, attempts: int = 1) -> StorageError:
    """The :class:`StorageError` for a failed request: the table, the
    operation and the file, what to check, and the original message (raise
    it ``from exc``)."""
    where = f"{uri}/{path}" if path else uri
    hint = _hint(exc)
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    message = f"{operation} of {where} failed{tries}" + (f" ({hint})" if hint else "") + f": {describe(exc)}"
    return StorageError(message, uri=uri, path=path)


class StorageErrorHandler(pafs.FSSpecHandler):
    """pyarrow's bridge to an fsspec filesystem, raising :class:`StorageError`
    (via :func:`storage_error`) when opening a file fails otherwise than for
    a missing object; pyarrow hands a Python exception raised here back to
    its caller unchanged. Reads of an opened file go to the fsspec file
    object, whose own retries apply."""

    def __init__(self, fs: Any, *, uri: str, root: str):
        super().__init__(fs)
        self._uri = uri
        self._root = root

    def _translate(self, operation: str, arrow_path: str, fn, *args):
        prefix = self._root + "/"
        rel = arrow_path[len(prefix):] if arrow_path.startswith(prefix) else arrow_path
        try:
            return fn(*args)
        except Exception as e:
            if is_missing_object(e) or classify_error(e) is ErrorKind.CONFLICT:
                raise
            raise storage_error(self._uri, operation, rel, e) from e

    # pyarrow's versions first ask ``fs.isfile``, which answers False for
    # any failure (a denied HEAD would read as a missing file): open directly.
    def open_input_file(self, path):
        return self._translate("read", path, lambda: pa.PythonFile(self.fs.open(path, mode="rb"), mode="r"))

    def open_input_stream(self, path):
        return self.open_input_file(path)

    def get_file_info(self, paths):
        return self._translate("stat", paths[0] if len(paths) == 1 else "", super().get_file_info, paths)


def outcome_unknown(uri: str, path: str, exc: BaseException) -> OutcomeUnknownError:
    """The :class:`OutcomeUnknownError` of a failed put-if-absent of ``path``."""
    hint = _hint(exc)
    return OutcomeUnknownError(
        f"put-if-absent of {uri}/{path} failed, outcome unknown (the object may exist)"
        + (f" ({hint})" if hint else "") + f": {describe(exc)}",
        uri=uri, path=path,
    )


def file_in_the_way(path: str) -> str | None:
    """The nearest of ``path`` and its parents that exists, if it is not a
    directory (a regular file where a directory should be); else None."""
    while True:
        try:
            return None if stat.S_ISDIR(os.stat(path).st_mode) else path
        except (FileNotFoundError, NotADirectoryError):
            parent = os.path.dirname(path)
            if parent == path:
                return None
            path = parent


def missing_table_reason(storage: "Storage") -> str:
    """Why no table is at ``storage``'s root, for a ``TableNotFoundError``:
    a regular file in the way, or no version file in ``_ct_log/``."""
    blocking = storage.blocking_file()
    if blocking is not None:
        return f"{blocking} is a file, not a table directory"
    return f"{LOG_DIR}/ holds no version file"
