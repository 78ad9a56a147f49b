"""Login for the dashboard (session + CSRF) and API tokens for scripts."""

from __future__ import annotations

from django.contrib.auth import authenticate, login, logout
from django.middleware.csrf import get_token
from django.utils.decorators import method_decorator
from django.views.decorators.csrf import csrf_protect, ensure_csrf_cookie
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.authtoken.models import Token
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from ..projects.permissions import submittable_projects


class CredentialsIn(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, trim_whitespace=False)


def _authenticate(request):
    data = CredentialsIn(data=request.data)
    data.is_valid(raise_exception=True)
    user = authenticate(request, **data.validated_data)
    return user


def _me(user) -> dict:
    """Who is signed in, and the projects they may submit to (the dashboard's project picker)."""
    projects = submittable_projects(user).order_by("name").values_list("name", flat=True)
    return {"username": user.username, "is_staff": user.is_staff, "projects": list(projects)}


@method_decorator(ensure_csrf_cookie, name="dispatch")
class CsrfView(APIView):
    permission_classes = [AllowAny]

    @extend_schema(responses={200: dict})
    def get(self, request):
        return Response({"csrftoken": get_token(request)})


@method_decorator(csrf_protect, name="dispatch")  # no login CSRF: a page elsewhere cannot log you in
class LoginView(APIView):
    permission_classes = [AllowAny]

    @extend_schema(request=CredentialsIn, responses={200: dict})
    def post(self, request):
        user = _authenticate(request)
        if user is None:
            return Response({"detail": "wrong username or password."}, status=status.HTTP_400_BAD_REQUEST)
        login(request, user)
        return Response(_me(user))


class LogoutView(APIView):
    permission_classes = [AllowAny]

    def post(self, request):
        logout(request)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MeView(APIView):
    def get(self, request):
        return Response(_me(request.user))


class TokenView(APIView):
    """POST username + password, get the API token (`Authorization: Token <t>` afterwards)."""

    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(request=CredentialsIn, responses={200: dict})
    def post(self, request):
        user = _authenticate(request)
        if user is None:
            return Response({"detail": "wrong username or password."}, status=status.HTTP_400_BAD_REQUEST)
        token, _ = Token.objects.get_or_create(user=user)
        return Response({"token": token.key, "username": user.username})
