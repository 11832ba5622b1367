"""Which error an answer of the service means: ``error_for`` (the error, or None for a 2xx) and
``raise_for_status`` (raises it). The client raises these; the engine reports them
(``on_error``, stderr) without raising, so both read the same words from one place.
"""

from __future__ import annotations

from .._errors import ApiError, AuthenticationError, NotFoundError, RateLimitError
from .._output import body_detail, service_message, shown
from .._status import AUTH, LIMITS, NOT_FOUND, RATE_LIMIT, is_redirect, is_success
from .answer import Answer, Limit
from .settings import ENV_ORG_ID, ENV_TOKEN, ENV_URL, said

__all__ = ["error_for", "raise_for_status"]


def error_for(answer: Answer, *, what: str, dataset: str | None = None,
              limit: Limit = "ingest") -> ApiError | None:
    """The error a non-2xx answer means (None for a 2xx), worded for ``what`` was asked (and
    the ``dataset``, for a 404 on one). ``limit``: the service's limit a 430 means for this
    request. The error carries no traceback: it may be kept (reported later, or handed to
    ``on_error``) without keeping frames alive."""
    status = answer.status
    if is_success(status):
        return None
    body = answer.body
    own = service_message(body)
    told = f": {own}" if own else ""
    if status in AUTH:
        return AuthenticationError(
            status, body,
            f"the service refused the token (HTTP {status}{told}) for {what}: check "
            f"{said('token').rstrip('.')} or {ENV_TOKEN} (valid, and allowed to do this; a "
            f"personal access token also needs {said('org_id')} / {ENV_ORG_ID})")
    if status in LIMITS:
        which = "rate" if status == RATE_LIMIT else limit
        wait = f"; retry after {answer.wait:g} s" if answer.wait is not None else ""
        return RateLimitError(status, body, f"{which} limited on {what} (HTTP {status}): the "
                                            f"service's {which} limit was reached{told}{wait}",
                              retry_after=answer.wait)
    if status in NOT_FOUND:
        if dataset is not None:
            name = shown(dataset)
            msg = (f"dataset {name} not found (HTTP {status}){told}: create it (`loghandler "
                   f"datasets create {name.strip(chr(39))}`), or check the dataset name and "
                   f"the base address ({ENV_URL})")
        else:
            msg = f"not found: {what} (HTTP {status}){told}; check the base address ({ENV_URL})"
        return NotFoundError(status, body, msg)
    if is_redirect(status):
        return ApiError(status, body, f"{what} was redirected (HTTP {status}); the base address "
                                      "is probably wrong (http vs https, or a missing path)")
    return ApiError(status, body, f"{what} failed with HTTP {status}{body_detail(body)}")


def raise_for_status(answer: Answer, *, what: str, dataset: str | None = None,
                     limit: Limit = "ingest") -> None:
    """Raise the error that matches a non-2xx answer (``error_for``); nothing for a 2xx."""
    error = error_for(answer, what=what, dataset=dataset, limit=limit)
    if error is not None:
        raise error
