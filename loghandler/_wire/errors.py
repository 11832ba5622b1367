"""Which error an answer of the service means: ``error_for`` (the error, or None for a 2xx) and
``raise_for_status`` (raises it). The client raises these; the engine reports them
(``on_error``, stderr) without raising, so both read the same words from one place.
"""

from __future__ import annotations

from .._errors import ApiError, AuthenticationError, NotFoundError, RateLimitError
from .._output import body_detail, clip, redact, service_message, shown
from .._status import AUTH, LIMITS, NOT_FOUND, RATE_LIMIT, is_redirect, is_success
from .answer import Answer, Limit
from .settings import ENV_TOKEN, said

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
    told = f": {clip(own, 60)}" if own else ""
    if status in AUTH:
        return AuthenticationError(
            status, body,
            f"the service refused the token (HTTP {status}{told}) for {what}: check "
            f"{said('token')} or {ENV_TOKEN} (a personal access token also needs "
            f"{said('org_id')})")
    if status in LIMITS:
        which = "rate" if status == RATE_LIMIT else limit
        wait = (f": retry after {answer.wait:g} s" if answer.wait is not None
                else ": retry later")
        return RateLimitError(status, body, f"the service's {which} limit was reached (HTTP "
                                            f"{status}{told}) for {what}{wait}",
                              retry_after=answer.wait)
    if status in NOT_FOUND:
        if dataset is not None:
            msg = (f"dataset {shown(dataset, 40)} not found (HTTP {status}): create it "
                   f"(loghandler datasets create {clip(redact(dataset), 40)}) or check the name "
                   f"and {said('url_arg')}")
        elif own and "dataset" in own.lower():
            # The service named what is missing (a dataset of a query): its words, whole, and
            # not the address, which is right since it answered.
            msg = f"{what}: not found (HTTP {status}: {own})"  # own: at most 500 characters
        else:
            msg = f"{what}: not found (HTTP {status}{told}): check {said('url_arg')}"
        return NotFoundError(status, body, msg)
    if is_redirect(status):
        return ApiError(status, body, f"{what} was redirected (HTTP {status}): check "
                                      f"{said('url_arg')} (https, no path too many or missing)")
    return ApiError(status, body,
                    f"{what} failed with HTTP {status}{clip(body_detail(body), 300)}")


def raise_for_status(answer: Answer, *, what: str, dataset: str | None = None,
                     limit: Limit = "ingest") -> None:
    """Raise the error that matches a non-2xx answer (``error_for``); nothing for a 2xx."""
    error = error_for(answer, what=what, dataset=dataset, limit=limit)
    if error is not None:
        raise error
