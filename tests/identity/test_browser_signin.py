"""Single sign-on in a real browser: Chromium signs in to the real server (gunicorn with the
production settings, HOOKSVC_OIDC_* and HOOKSVC_ROLES_FILE from the environment) through a
real OpenID provider's form, sees only its team's cluster, approves it, and the run's history
names the person as the provider did (e-mail and subject). Screenshots are kept under
test-output/<test name>/.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, expect

from tests.identity.conftest import RULES
from tests.identity.test_role_matrix import waiting_run
from tests.support import oidc, servers
from tests.workflows.test_browser import browser, shoot  # noqa: F401  (the fixture)
from workflows.models import Identity, RunEvent

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def sso_server(
    tls_files: servers.TLSFiles,
    provider: oidc.Provider,
    tmp_path: Path,
    django_db_setup: object,
) -> Iterator[servers.HookServer]:
    """The real server, configured for the provider as a Deployment's environment does it."""
    rules = tmp_path / "roles.yaml"
    rules.write_text(RULES)
    env = {
        "HOOKSVC_OIDC_ISSUER": provider.issuer,
        "HOOKSVC_OIDC_CLIENT_ID": "hooksvc",
        "HOOKSVC_OIDC_CLIENT_SECRET": "client-secret-for-tests",
        "HOOKSVC_OIDC_CA_FILE": str(provider.ca_file),
        "HOOKSVC_ROLES_FILE": str(rules),
        "HOOKSVC_LOCAL_LOGIN": "0",
        "HOOKSVC_OIDC_DISPLAY_NAME": "Example Corp SSO",
    }
    with servers.hook_server(tls_files.server_dir, tmp_path / "web.log", extra_env=env) as server:
        yield server


def test_an_app_team_member_signs_in_through_the_provider_and_approves_their_cluster(
    sso_server: servers.HookServer,
    provider: oidc.Provider,
    browser: BrowserContext,  # noqa: F811
    output_dir: Path,
) -> None:
    mine, theirs = waiting_run("team-a"), waiting_run("team-b")
    page = browser.new_page()
    page.set_default_timeout(30_000)
    page.goto(f"https://localhost:{sso_server.port}/admin/")

    # Local accounts are off: the sign-in page offers the provider only.
    expect(page.locator("#sso-sign-in")).to_have_text("Sign in with Example Corp SSO")
    expect(page.locator("#login-form")).to_have_count(0)
    shoot(page, output_dir, "sign-in")
    page.click("#sso-sign-in")

    # The provider's own form (oidc-provider-mock's authorization page).
    page.get_by_placeholder("sub").first.fill("sub-ann")
    page.get_by_role("button", name="Authorize").click()

    # Back in hooksvc, signed in: the fleet shows team-a's cluster and not team-b's.
    rows = page.locator("#fleet tbody.hk-cluster")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("team-a/team-a-prod")
    expect(page.locator("#user-tools")).to_contain_text("ann@example.com")
    shoot(page, output_dir, "fleet")

    rows.first.locator("a", has_text="run ").click()
    page.locator('tr[data-step="approve"]').get_by_role("link", name="Approve").click()
    page.fill("#id_reason", "team-a's window is open")
    page.click("#confirm-action")
    expect(page.locator(".messagelist")).to_contain_text("recorded as admin:ann@example.com")
    history = page.locator("#history")
    expect(history).to_contain_text("admin:ann@example.com")
    expect(history).to_contain_text("ann@example.com (subject sub-ann)")
    shoot(page, output_dir, "history")

    # The other team's run is not there for her, not even by its address.
    other = page.goto(
        f"https://localhost:{sso_server.port}/admin/workflows/run/{theirs.pk}/change/"
    )
    assert other is not None and other.status == 404

    event = RunEvent.objects.get(kind="action")
    assert (event.run_id, event.actor, event.actor_subject, event.actor_email) == (
        mine.pk,
        "admin:ann@example.com",
        "sub-ann",
        "ann@example.com",
    )
    assert Identity.objects.get().groups == ["team-a-operators"]
