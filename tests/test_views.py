"""Views: the View value object and client.views.list / update over real HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from loghandler import ApiError, Client, ConfigurationError, NotFoundError, View

TOKEN = "xaat-VIEWSSECRET-0c4d2e"
SIX = {"aplQuery", "datasets", "description", "name", "sharedByOrg", "sharedByOrgName"}

VIEW_1 = {
    "id": "v1",
    "name": "errors",
    "aplQuery": "['logs'] | where level == 'error'",
    "datasets": ["logs"],
    "description": "all errors",
    "sharedByOrg": "org-1",
    "sharedByOrgName": "Acme",
    "createdAt": "2024-01-01T00:00:00Z",
    "owner": {"id": "u1", "emails": ["a@example.com"]},
}
VIEW_2 = {
    "id": "v2",
    "name": "slow",
    "aplQuery": "['web'] | where duration > 1s",
    "datasets": ["web", "api"],
    "description": "",
    "sharedByOrg": "org-1",
    "sharedByOrgName": "Acme",
}


@pytest.fixture
def client(httpserver: HTTPServer) -> Iterator[Client]:
    with Client(TOKEN, url=httpserver.url_for("/")) as c:
        yield c


def record_put(httpserver: HTTPServer, view_id: str, answer: Any = None) -> list[Any]:
    """Accept PUT /v2/views/<view_id>, keep the JSON bodies; answer with ``answer`` or the body."""
    bodies: list[Any] = []

    def handler(request: Request) -> Response:
        body = json.loads(request.get_data())
        bodies.append(body)
        assert request.headers["Content-Type"] == "application/json"
        result = body if answer is None else answer
        return Response(json.dumps(result), content_type="application/json")

    httpserver.expect_request(f"/v2/views/{view_id}", method="PUT").respond_with_handler(handler)
    return bodies


class TestView:
    def test_from_dict_to_dict_round_trip(self) -> None:
        """from_dict then to_dict gives back exactly the service's JSON, unknown fields too."""
        view = View.from_dict(VIEW_1)
        assert view.name == "errors"
        assert view.apl_query == VIEW_1["aplQuery"]
        assert view.datasets == ["logs"]
        assert view.shared_by_org == "org-1" and view.shared_by_org_name == "Acme"
        assert view.id == "v1"
        assert view.extra == {"createdAt": VIEW_1["createdAt"], "owner": VIEW_1["owner"]}
        assert view.to_dict() == VIEW_1

    def test_missing_fields_and_no_id(self) -> None:
        """Absent fields get empty defaults; id is None when the service sends none."""
        view = View.from_dict({"name": "n", "datasets": None, "description": None})
        assert view.id is None
        assert view.datasets == [] and view.description == "" and view.apl_query == ""
        out = view.to_dict()
        assert set(out) == SIX
        assert "id" not in out

    def test_numeric_id_read_as_string(self) -> None:
        """A numeric id is read as its string, so ids compare the same way everywhere."""
        assert View.from_dict({"id": 42}).id == "42"

    def test_single_dataset_string(self) -> None:
        """A lone dataset name is one dataset, not a list of its letters."""
        assert View.from_dict({"datasets": "logs"}).datasets == ["logs"]

    def test_to_dict_copies_datasets(self) -> None:
        """to_dict's list is a copy: editing it does not change the view."""
        view = View(name="n", datasets=["a"])
        view.to_dict()["datasets"].append("b")
        assert view.datasets == ["a"]

    def test_from_dict_refuses_non_object(self) -> None:
        """A view that is not a JSON object is an ApiError, not a crash."""
        with pytest.raises(ApiError):
            View.from_dict(["not", "a", "view"])  # type: ignore[arg-type]


class TestList:
    def test_list_returns_views(self, httpserver: HTTPServer, client: Client) -> None:
        """GET /v2/views -> list of View objects, unknown fields kept in extra."""
        httpserver.expect_request("/v2/views", method="GET").respond_with_json([VIEW_1, VIEW_2])
        views = client.views.list()
        assert [v.id for v in views] == ["v1", "v2"]
        assert all(isinstance(v, View) for v in views)
        assert views[0].extra["owner"] == VIEW_1["owner"]
        assert views[1].datasets == ["web", "api"]

    def test_list_empty(self, httpserver: HTTPServer, client: Client) -> None:
        """No views -> an empty list."""
        httpserver.expect_request("/v2/views").respond_with_json([])
        assert client.views.list() == []

    def test_list_not_a_list(self, httpserver: HTTPServer, client: Client) -> None:
        """An answer that is not a list is an ApiError naming what was expected."""
        httpserver.expect_request("/v2/views").respond_with_json({"views": []})
        with pytest.raises(ApiError, match="list"):
            client.views.list()


class TestUpdate:
    def test_full_body_update(self, httpserver: HTTPServer, client: Client) -> None:
        """update(id, view) PUTs the whole view (six fields, id, unknown fields) and reads back."""
        bodies = record_put(httpserver, "v1")
        view = View.from_dict(VIEW_1)
        view.apl_query = "['logs'] | limit 10"
        result = client.views.update("v1", view)
        (body,) = bodies
        assert set(body) >= SIX
        assert body == {**VIEW_1, "aplQuery": "['logs'] | limit 10"}
        assert result == view
        assert [req.method for req, _ in httpserver.log] == ["PUT"]  # no list() needed

    def test_update_sends_all_six_fields_even_when_empty(
        self, httpserver: HTTPServer, client: Client
    ) -> None:
        """A view built from a few fields still sends all six (partial updates are undefined)."""
        bodies = record_put(httpserver, "v9", answer={"id": "v9", "name": "only name"})
        result = client.views.update("v9", View(name="only name"))
        assert set(bodies[0]) == SIX
        assert bodies[0]["name"] == "only name" and bodies[0]["datasets"] == []
        assert result.id == "v9" and result.name == "only name"

    def test_update_from_dict(self, httpserver: HTTPServer, client: Client) -> None:
        """The view may be given as the service's JSON dict."""
        bodies = record_put(httpserver, "v2")
        client.views.update("v2", dict(VIEW_2))
        assert bodies[0] == VIEW_2

    def test_merged_update(self, httpserver: HTTPServer, client: Client) -> None:
        """update(id, **changes) starts from the current view found by id in list()."""
        httpserver.expect_request("/v2/views", method="GET").respond_with_json([VIEW_2, VIEW_1])
        bodies = record_put(httpserver, "v1")
        result = client.views.update("v1", description="edited", datasets=["logs", "audit"])
        (body,) = bodies
        assert body == {**VIEW_1, "description": "edited", "datasets": ["logs", "audit"]}
        assert result.description == "edited"
        assert result.extra["owner"] == VIEW_1["owner"]
        assert [req.method for req, _ in httpserver.log] == ["GET", "PUT"]

    def test_changes_apply_on_top_of_given_view(
        self, httpserver: HTTPServer, client: Client
    ) -> None:
        """With both a view and changes, the changes win and no list() is made."""
        bodies = record_put(httpserver, "v2")
        client.views.update("v2", View.from_dict(VIEW_2), name="renamed")
        assert bodies[0] == {**VIEW_2, "name": "renamed"}
        assert [req.method for req, _ in httpserver.log] == ["PUT"]

    def test_unknown_id(self, httpserver: HTTPServer, client: Client) -> None:
        """A merged update of an id list() does not know -> NotFoundError, and no PUT."""
        httpserver.expect_request("/v2/views", method="GET").respond_with_json([VIEW_1])
        with pytest.raises(NotFoundError, match="nope"):
            client.views.update("nope", name="x")
        assert [req.method for req, _ in httpserver.log] == ["GET"]

    def test_service_404_on_put(self, httpserver: HTTPServer, client: Client) -> None:
        """A 404 from the PUT itself is a NotFoundError too."""
        httpserver.expect_request("/v2/views/v3", method="PUT").respond_with_json(
            {"message": "view not found"}, status=404
        )
        with pytest.raises(NotFoundError, match="view not found"):
            client.views.update("v3", View(name="x"))

    def test_unknown_change_name(self, client: Client) -> None:
        """A change that is not a View field is a ConfigurationError listing the valid names."""
        with pytest.raises(ConfigurationError, match="apl_query") as info:
            client.views.update("v1", aplQuery="x")
        assert "aplQuery" in str(info.value)

    def test_datasets_as_string_refused(self, client: Client) -> None:
        """datasets="logs" is refused: it must be a list of names."""
        with pytest.raises(ConfigurationError, match="datasets"):
            client.views.update("v1", datasets="logs")

    @pytest.mark.parametrize("view_id", ["", None])
    def test_empty_id(self, client: Client, view_id: Any) -> None:
        """An empty view id is a ConfigurationError."""
        with pytest.raises(ConfigurationError):
            client.views.update(view_id, View(name="x"))

    def test_id_is_quoted(self, httpserver: HTTPServer, client: Client) -> None:
        """A view id with '/' or '?' stays one path segment, and the body names the same id."""
        seen: list[str] = []

        def handler(request: Request) -> Response:
            seen.append(request.environ.get("RAW_URI") or request.environ["REQUEST_URI"])
            return Response(request.get_data(), content_type="application/json")

        httpserver.expect_request("/v2/views/a/b?c", method="PUT").respond_with_handler(handler)
        result = client.views.update("a/b?c", View(name="x", id="stale"))
        assert seen == ["/v2/views/a%2Fb%3Fc"]
        assert result.id == "a/b?c"

    def test_empty_answer(self, httpserver: HTTPServer, client: Client) -> None:
        """An empty 2xx answer returns the view that was sent."""
        httpserver.expect_request("/v2/views/v2", method="PUT").respond_with_data("", status=204)
        result = client.views.update("v2", View.from_dict(VIEW_2), description="d")
        assert result.description == "d" and result.id == "v2"


class TestGetCreateDelete:
    def test_get_by_id(self, httpserver: HTTPServer, client: Client) -> None:
        """get(id) is one GET /v2/views/{id}, the id quoted as one path segment."""
        httpserver.expect_request("/v2/views/a/b", method="GET").respond_with_json(VIEW_1)
        assert client.views.get("a/b").to_dict() == VIEW_1
        assert [req.path for req, _ in httpserver.log] == ["/v2/views/a/b"]
        assert "a%2Fb" in httpserver.log[0][0].environ["REQUEST_URI"]

    def test_get_without_id_in_answer(self, httpserver: HTTPServer, client: Client) -> None:
        """An answer without an id gets the id that was asked for."""
        httpserver.expect_request("/v2/views/v2").respond_with_json(
            {k: v for k, v in VIEW_2.items() if k != "id"})
        assert client.views.get("v2").id == "v2"

    def test_get_unknown(self, httpserver: HTTPServer, client: Client) -> None:
        """A 404 is a NotFoundError that says how to find the ids."""
        httpserver.expect_request("/v2/views/zz").respond_with_json(
            {"code": 404, "message": "view not found"}, status=404)
        with pytest.raises(NotFoundError, match="views list"):
            client.views.get("zz")

    def test_create_posts_without_id(self, httpserver: HTTPServer, client: Client) -> None:
        """create POSTs all six fields, never an id, and returns the service's view."""
        bodies: list[Any] = []

        def handler(request: Request) -> Response:
            body = json.loads(request.get_data())
            bodies.append(body)
            return Response(json.dumps({**body, "id": "new-1"}), content_type="application/json")

        httpserver.expect_request("/v2/views", method="POST").respond_with_handler(handler)
        made = client.views.create(View(name="n", apl_query="q", id="mine", extra={"x": 1}))
        assert bodies == [{"name": "n", "aplQuery": "q", "datasets": [], "description": "",
                           "sharedByOrg": "", "sharedByOrgName": "", "x": 1}]
        assert made.id == "new-1" and made.extra == {"x": 1}
        made = client.views.create({"name": "d", "aplQuery": "q2"})
        assert made.name == "d" and bodies[-1]["aplQuery"] == "q2"

    @pytest.mark.parametrize("view", [View(name="n"), View(apl_query="q"), "not a view"])
    def test_create_refuses_incomplete_views(self, client: Client, view: Any) -> None:
        """A view without a name or a query (or not a view) is refused before any request."""
        with pytest.raises(ConfigurationError):
            client.views.create(view)

    def test_delete(self, httpserver: HTTPServer, client: Client) -> None:
        """delete is DELETE /v2/views/{id}; a 204 returns None, a 404 raises."""
        httpserver.expect_request("/v2/views/v1", method="DELETE").respond_with_data(
            "", status=204)
        httpserver.expect_request("/v2/views/v9", method="DELETE").respond_with_json(
            {"code": 404, "message": "view not found"}, status=404)
        assert client.views.delete("v1") is None
        with pytest.raises(NotFoundError, match="view not found"):
            client.views.delete("v9")
        with pytest.raises(ConfigurationError):
            client.views.delete("")
