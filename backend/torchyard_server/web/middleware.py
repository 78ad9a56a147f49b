"""Checks on every request before any view."""

from __future__ import annotations

from django.http import JsonResponse


def refuse_nul_characters(get_response):
    """A NUL character (`%00`) in the URL's path or query is bad input, a 400: PostgreSQL's text
    cannot hold one, so a lookup or filter with it would end in a database error (a 500). Body
    fields are checked by their serializers."""

    def middleware(request):
        query = request.GET
        if "\x00" in request.path or any("\x00" in key or any("\x00" in v for v in values)
                                          for key, values in query.lists()):
            return JsonResponse({"detail": "the URL holds a NUL character (%00)."}, status=400)
        return get_response(request)

    return middleware
