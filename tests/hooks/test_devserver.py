"""`make run`'s admin account: created from the environment, or a hint; never a default."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from hooksvc import devserver

pytestmark = pytest.mark.django_db

PASSWORD = "correct-horse-battery-7"


def test_make_run_creates_the_named_superuser_without_showing_the_password() -> None:
    notice = devserver.ensure_admin(
        {"HOOKSVC_ADMIN_USERNAME": "ops", "HOOKSVC_ADMIN_PASSWORD": PASSWORD}
    )
    user = User.objects.get(username="ops")
    assert user.is_superuser and user.is_staff and user.is_active
    assert user.check_password(PASSWORD)
    assert "Created the admin user 'ops'" in notice
    assert PASSWORD not in notice


def test_make_run_leaves_an_existing_admin_user_as_it_is() -> None:
    User.objects.create_user("ops", password="an-earlier-password-1")
    notice = devserver.ensure_admin(
        {"HOOKSVC_ADMIN_USERNAME": "ops", "HOOKSVC_ADMIN_PASSWORD": PASSWORD}
    )
    user = User.objects.get(username="ops")
    assert user.check_password("an-earlier-password-1") and not user.is_superuser
    assert notice == "Admin user 'ops' exists; left as it is."


def test_make_run_refuses_a_weak_password_and_says_why_without_echoing_it() -> None:
    notice = devserver.ensure_admin(
        {"HOOKSVC_ADMIN_USERNAME": "ops", "HOOKSVC_ADMIN_PASSWORD": "12345"}
    )
    assert not User.objects.exists()
    assert "not created" in notice and "too short" in notice
    assert "12345" not in notice


def test_without_the_variables_make_run_says_how_to_create_an_admin_user() -> None:
    assert "manage.py createsuperuser" in devserver.ensure_admin({})
    assert not User.objects.exists()
    User.objects.create_superuser("root", password=PASSWORD)
    assert devserver.ensure_admin({}) == ""
    assert "both variables are needed" in devserver.ensure_admin({"HOOKSVC_ADMIN_USERNAME": "x"})
