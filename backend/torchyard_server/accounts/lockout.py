"""What a client locked out by django-axes (settings.AXES_LOCKOUT_CALLABLE) is told: JSON with a
`detail` on the API, like every other API error; plain text elsewhere (the Django admin's login)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.http import HttpResponse, JsonResponse


def _duration(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    if minutes >= 120 and minutes % 60 == 0:
        return f"{minutes // 60} hours"
    if minutes >= 1:
        return f"{minutes} minute" + ("s" if minutes != 1 else "")
    return f"{int(delta.total_seconds())} seconds"


def lockout_message() -> str:
    # Every attempt while locked starts the wait again (AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT).
    return (f"too many failed sign-ins for this username from this address: locked for "
            f"{_duration(settings.AXES_COOLOFF_TIME)} from the last attempt; an administrator can lift "
            "it sooner (admin site, Axes, Access attempts).")


def lockout_response(request, original_response=None, credentials=None) -> HttpResponse:
    status = settings.AXES_HTTP_RESPONSE_CODE
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": lockout_message()}, status=status)
    return HttpResponse(lockout_message(), status=status, content_type="text/plain; charset=utf-8")
