"""Sign-in for the dashboard (session + CSRF) and API tokens for scripts: several per user, named,
with an optional expiry, stored hashed (knox), shown in clear once, when created.

Both ways of signing in with a password are rate-limited per client address (ScopedRateThrottle,
scope `login`) and locked for a while after repeated failures for one username from one address
(django-axes: it hears the failures through Django's `authenticate`, which must get the request).
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth import authenticate, login, logout
from django.contrib.auth.signals import user_logged_in
from django.middleware.csrf import get_token
from django.utils.decorators import method_decorator
from django.views.decorators.csrf import csrf_protect, ensure_csrf_cookie
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from ..projects.permissions import submittable_projects
from ..rest.openapi import ErrorOut
from .models import ApiToken
from .selectors import api_tokens_of
from .services import api_token_create, api_token_revoke

TOO_MANY = OpenApiResponse(ErrorOut, description="Too many attempts from this address, or this "
                           "username is locked here after repeated failures: `detail` says for how long.")


class CredentialsIn(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, trim_whitespace=False)


class TokenSpecIn(serializers.Serializer):
    name = serializers.CharField(max_length=100, help_text="what the token is for, e.g. `laptop` or `CI`")
    expires_in_days = serializers.IntegerField(min_value=1, max_value=3650, required=False, allow_null=True,
                                               help_text="days until the token stops working (default: never)")

    def expires_in(self) -> timedelta | None:
        days = self.validated_data.get("expires_in_days")
        return timedelta(days=days) if days else None


class TokenLoginIn(CredentialsIn, TokenSpecIn):
    name = serializers.CharField(max_length=100, required=False, default="API token")


class ApiTokenOut(serializers.ModelSerializer):
    prefix = serializers.CharField(read_only=True, help_text="the token's first characters, to tell it apart")

    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created", "expiry", "last_used"]


class ApiTokenCreatedOut(ApiTokenOut):
    token = serializers.CharField(help_text="the token itself: shown this once, never again")
    username = serializers.CharField()

    class Meta(ApiTokenOut.Meta):
        fields = [*ApiTokenOut.Meta.fields, "token", "username"]


def _created(token: ApiToken, key: str) -> dict:
    return {**ApiTokenOut(token).data, "token": key, "username": token.user.get_username()}


def _authenticate(request, data: dict):
    # django-axes reads the client's address from, and flags a lockout on, the HttpRequest that
    # its middleware will answer: DRF's Request wrapper would keep the flag to itself.
    return authenticate(request._request, username=data["username"], password=data["password"])


class _PasswordSignIn(APIView):
    permission_classes = [AllowAny]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "login"


def _me(user) -> dict:
    """Who is signed in, and the projects they may submit to (the dashboard's project picker)."""
    projects = submittable_projects(user).order_by("name").values_list("name", flat=True)
    return {"username": user.username, "is_staff": user.is_staff, "projects": list(projects)}


WRONG = {"detail": "wrong username or password."}


class MeOut(serializers.Serializer):
    username = serializers.CharField()
    is_staff = serializers.BooleanField()
    projects = serializers.ListField(child=serializers.CharField(), help_text="the projects this user may submit to")


class CsrfOut(serializers.Serializer):
    csrftoken = serializers.CharField(help_text="send it back as the X-CSRFToken header")


@method_decorator(ensure_csrf_cookie, name="dispatch")
class CsrfView(APIView):
    permission_classes = [AllowAny]

    @extend_schema(responses=CsrfOut)
    def get(self, request):
        return Response({"csrftoken": get_token(request)})


@method_decorator(csrf_protect, name="dispatch")  # no login CSRF: a page elsewhere cannot log you in
class LoginView(_PasswordSignIn):
    @extend_schema(request=CredentialsIn, responses={200: MeOut, 429: TOO_MANY, 403: OpenApiResponse(
        ErrorOut, description="No CSRF cookie and token: GET /api/auth/csrf first.")})
    def post(self, request):
        data = CredentialsIn(data=request.data)
        data.is_valid(raise_exception=True)
        user = _authenticate(request, data.validated_data)
        if user is None:
            return Response(WRONG, status=status.HTTP_400_BAD_REQUEST)
        login(request._request, user)
        return Response(_me(user))


class LogoutView(APIView):
    permission_classes = [AllowAny]

    @extend_schema(request=None, responses={204: None})
    def post(self, request):
        logout(request)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MeView(APIView):
    @extend_schema(responses=MeOut)
    def get(self, request):
        return Response(_me(request.user))


class TokenView(_PasswordSignIn):
    """POST username + password (and a name, an expiry), get a new API token (`Authorization:
    Token <t>` afterwards). `torchyard login` uses this."""

    authentication_classes: list = []

    @extend_schema(request=TokenLoginIn, responses={200: ApiTokenCreatedOut, 429: TOO_MANY})
    def post(self, request):
        data = TokenLoginIn(data=request.data)
        data.is_valid(raise_exception=True)
        user = _authenticate(request, data.validated_data)
        if user is None:
            return Response(WRONG, status=status.HTTP_400_BAD_REQUEST)
        # A sign-in like the dashboard's: last_login, and django-axes forgets the earlier failures.
        user_logged_in.send(sender=user.__class__, request=request._request, user=user)
        token, key = api_token_create(user=user, name=data.validated_data["name"], expires_in=data.expires_in())
        return Response(_created(token, key))


class TokenListView(APIView):
    """The signed-in user's own tokens (never the tokens themselves), and new ones."""

    @extend_schema(responses=ApiTokenOut(many=True))
    def get(self, request):
        return Response(ApiTokenOut(api_tokens_of(user=request.user), many=True).data)

    @extend_schema(request=TokenSpecIn, responses={201: ApiTokenCreatedOut})
    def post(self, request):
        data = TokenSpecIn(data=request.data)
        data.is_valid(raise_exception=True)
        token, key = api_token_create(user=request.user, name=data.validated_data["name"], expires_in=data.expires_in())
        return Response(_created(token, key), status=status.HTTP_201_CREATED)


class TokenDetailView(APIView):
    @extend_schema(responses={204: None})
    def delete(self, request, token_id: int):
        """Revoke one of your own tokens: it stops working at once. Anyone else's is a 404."""
        if not api_token_revoke(user=request.user, token_id=token_id):
            raise NotFound("you have no API token with this id.")
        return Response(status=status.HTTP_204_NO_CONTENT)
