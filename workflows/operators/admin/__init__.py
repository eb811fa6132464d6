"""The Django admin, the operator's UI: the fleet, runs with their timelines and actions, templates.

`apps.AdminConfig` (in INSTALLED_APPS in place of django.contrib.admin) makes `site.Site`
the admin site and registers the model admins: `runs` (the run list and a run's page,
confirmed actions), `documents` (templates and profiles as YAML documents), `hookcalls`
(what CAPI asked and was answered), `bypasses` (break glass, in force or past), `rollouts`
(operators' resumes and abandons of rollouts), `tokens`
(the REST API's tokens, for admins). `fleet`,
`clusters` and `bulk` are the site's own pages; `common` holds what they share. This
package imports nothing itself, so that settings can name its AppConfig before the models
are loaded.
"""
