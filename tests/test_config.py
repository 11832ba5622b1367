"""Configuration: arguments, LOGHANDLER_* variables, regions, headers and every refusal."""

from __future__ import annotations

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

import loghandler
from loghandler import Client, ConfigurationError
from loghandler._config import resolve_dataset
from loghandler._wire.settings import Settings

TOKEN = "xaat-CONFIGSECRET-5b1e0d"
PAT = "xapt-CONFIGPAT-77aa01"


def capture(httpserver: HTTPServer, path: str, method: str = "GET") -> list[Request]:
    """Answer ``path`` with ``[]`` and keep every request that arrives there."""
    seen: list[Request] = []

    def handler(request: Request) -> Response:
        request.get_data()
        seen.append(request)
        return Response("[]", status=200, content_type="application/json")

    httpserver.expect_request(path, method=method).respond_with_handler(handler)
    return seen


def assert_clean(text: str) -> None:
    assert TOKEN not in text and PAT not in text and "CONFIGSECRET" not in text


class TestHeaders:
    def test_api_token_sends_authorization_only(self, httpserver: HTTPServer) -> None:
        """An API token is sent as a bearer token, and no org id header goes with it."""
        seen = capture(httpserver, "/v2/views")
        with Client(TOKEN, url=httpserver.url_for("/")) as client:
            client.views.list()
        (req,) = seen
        assert req.headers["Authorization"] == f"Bearer {TOKEN}"
        assert "x-service-org-id" not in {k.lower() for k, _ in req.headers.items()}
        assert req.headers["User-Agent"] == f"loghandler/{loghandler.__version__}"
        assert "Content-Type" not in req.headers  # a GET has no body

    def test_pat_sends_org_id(self, httpserver: HTTPServer) -> None:
        """A personal access token goes with x-service-org-id: <org_id>."""
        seen = capture(httpserver, "/v2/views")
        with Client(PAT, org_id="org-123", url=httpserver.url_for("/")) as client:
            client.views.list()
        (req,) = seen
        assert req.headers["Authorization"] == f"Bearer {PAT}"
        assert req.headers["x-service-org-id"] == "org-123"

    def test_org_id_from_environment(
        self, httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """LOGHANDLER_TOKEN and LOGHANDLER_ORG_ID are read when no argument is given."""
        monkeypatch.setenv("LOGHANDLER_TOKEN", PAT)
        monkeypatch.setenv("LOGHANDLER_ORG_ID", "org-env")
        monkeypatch.setenv("LOGHANDLER_URL", httpserver.url_for("/"))
        seen = capture(httpserver, "/v2/views")
        with Client() as client:
            client.views.list()
        assert seen[0].headers["Authorization"] == f"Bearer {PAT}"
        assert seen[0].headers["x-service-org-id"] == "org-env"

    def test_body_has_content_type(self, httpserver: HTTPServer) -> None:
        """A request with a body says Content-Type: application/json."""
        seen = capture(httpserver, "/v1/datasets/logs/ingest", method="POST")
        with Client(TOKEN, url=httpserver.url_for("/")) as client:
            client.ingest("logs", [{"a": 1}])
        assert seen[0].headers["Content-Type"] == "application/json"
        assert seen[0].headers["Authorization"] == f"Bearer {TOKEN}"


class TestRegions:
    def test_us_is_default(self, httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without a region, LOGHANDLER_URL is the base address."""
        monkeypatch.setenv("LOGHANDLER_URL", httpserver.url_for("/us"))
        monkeypatch.setenv("LOGHANDLER_EU_URL", "https://eu.invalid")
        seen = capture(httpserver, "/us/v2/views")
        client = Client(TOKEN)
        assert client.settings.region == "us"
        client.views.list()
        assert len(seen) == 1

    @pytest.mark.parametrize("how", ["argument", "environment"])
    def test_eu(self, httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
        """region="eu" (or LOGHANDLER_REGION=eu) uses LOGHANDLER_EU_URL."""
        monkeypatch.setenv("LOGHANDLER_URL", "https://us.invalid")
        monkeypatch.setenv("LOGHANDLER_EU_URL", httpserver.url_for("/eu"))
        if how == "environment":
            monkeypatch.setenv("LOGHANDLER_REGION", "EU")
            client = Client(TOKEN)
        else:
            client = Client(TOKEN, region="eu")
        seen = capture(httpserver, "/eu/v2/views")
        client.views.list()
        assert len(seen) == 1
        assert client.settings.region == "eu"

    def test_explicit_url_wins_over_region(
        self, httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An explicit url= wins whatever the region and its variable say."""
        monkeypatch.setenv("LOGHANDLER_EU_URL", "https://eu.invalid")
        monkeypatch.setenv("LOGHANDLER_URL", "https://us.invalid")
        seen = capture(httpserver, "/v2/views")
        Client(TOKEN, region="eu", url=httpserver.url_for("/")).views.list()
        assert len(seen) == 1

    def test_explicit_url_without_any_variable(self) -> None:
        """url= alone is enough, even for region eu with no LOGHANDLER_EU_URL."""
        assert Client(TOKEN, url="https://api.example", region="eu").url == "https://api.example"

    @pytest.mark.parametrize("suffix", ["/prefix", "/prefix/", "/prefix//"])
    def test_path_prefix_kept_without_double_slash(
        self, httpserver: HTTPServer, suffix: str
    ) -> None:
        """A base address's path prefix is kept, and a trailing slash never makes ``//``."""
        seen: list[str] = []

        def handler(request: Request) -> Response:
            seen.append(request.environ.get("RAW_URI") or request.environ["REQUEST_URI"])
            return Response("[]", content_type="application/json")

        httpserver.expect_request("/prefix/v2/views").respond_with_handler(handler)
        base = httpserver.url_for("/").rstrip("/") + suffix
        Client(TOKEN, url=base).views.list()
        assert seen == ["/prefix/v2/views"]

    def test_host_only_with_trailing_slash(self, httpserver: HTTPServer) -> None:
        """``http://host:port/`` gives ``/v2/views``, not ``//v2/views``."""
        seen = capture(httpserver, "/v2/views")
        Client(TOKEN, url=httpserver.url_for("/")).views.list()
        assert len(seen) == 1
        assert (seen[0].environ.get("RAW_URI") or seen[0].environ["REQUEST_URI"]) == "/v2/views"


def config_error(**kwargs: object) -> str:
    with pytest.raises(ConfigurationError) as info:
        Client(**kwargs)  # type: ignore[arg-type]
    message = str(info.value)
    assert_clean(message)
    assert_clean(repr(info.value))
    return message


class TestConfigurationErrors:
    def test_is_a_value_error(self) -> None:
        """ConfigurationError is also a ValueError (and a loghandler.Error)."""
        assert issubclass(ConfigurationError, ValueError)
        assert issubclass(ConfigurationError, loghandler.Error)

    def test_missing_token(self) -> None:
        """No token anywhere: the message names token= and LOGHANDLER_TOKEN."""
        message = config_error(url="https://api.example")
        assert "token=" in message and "LOGHANDLER_TOKEN" in message

    def test_empty_token_variable_is_missing(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """An empty LOGHANDLER_TOKEN counts as missing."""
        monkeypatch.setenv("LOGHANDLER_TOKEN", "")
        assert "LOGHANDLER_TOKEN" in config_error(url="https://api.example")

    def test_missing_us_base_address(self) -> None:
        """No url= and no LOGHANDLER_URL: the message names both."""
        message = config_error(token=TOKEN)
        assert "url=" in message and "LOGHANDLER_URL" in message

    def test_missing_eu_base_address(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Region eu without LOGHANDLER_EU_URL fails even when LOGHANDLER_URL is set."""
        monkeypatch.setenv("LOGHANDLER_URL", "https://us.example")
        message = config_error(token=TOKEN, region="eu")
        assert "url=" in message and "LOGHANDLER_EU_URL" in message

    @pytest.mark.parametrize("region", ["ap", "us-east", 7])
    def test_unknown_region(self, region: object) -> None:
        """An unknown region names region= and LOGHANDLER_REGION."""
        message = config_error(token=TOKEN, url="https://api.example", region=region)
        assert "region=" in message and "LOGHANDLER_REGION" in message

    def test_unknown_region_from_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """LOGHANDLER_REGION is validated like the argument."""
        monkeypatch.setenv("LOGHANDLER_REGION", "mars")
        assert "LOGHANDLER_REGION" in config_error(token=TOKEN, url="https://api.example")

    @pytest.mark.parametrize(
        "bad", [f"{TOKEN} ", f" {TOKEN}", f"{TOKEN}\n", f"{TOKEN}\r", f"xa{TOKEN}\tb",
                f"{TOKEN}\x00", f"{TOKEN}\x1b", f"{TOKEN}\x7f", f"{TOKEN}\u2028"],
    )
    def test_token_with_whitespace_or_control(self, bad: str) -> None:
        """Whitespace or control characters in a token are refused, without echoing it."""
        message = config_error(token=bad, url="https://api.example")
        assert "token=" in message and "LOGHANDLER_TOKEN" in message

    def test_token_with_newline_from_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The usual pasted-token mistake, a trailing newline in the variable, is caught."""
        monkeypatch.setenv("LOGHANDLER_TOKEN", TOKEN + "\n")
        assert "LOGHANDLER_TOKEN" in config_error(url="https://api.example")

    def test_token_not_a_string(self) -> None:
        """A token of the wrong type is a ConfigurationError, not a TypeError later."""
        assert "token=" in config_error(token=12345678, url="https://api.example")

    @pytest.mark.parametrize("org_id", ["org\r\nX-Evil: 1", "org\n", "org\r", "", "a b"])
    def test_org_id_with_crlf(self, org_id: str) -> None:
        """An org id that could inject a header is refused, naming org_id and the variable."""
        message = config_error(token=TOKEN, url="https://api.example", org_id=org_id)
        assert "org_id" in message and "LOGHANDLER_ORG_ID" in message

    @pytest.mark.parametrize(
        "url", ["http://api.example", "http://10.0.0.1:8080", "http://[2001:db8::1]/x"]
    )
    def test_plain_http_refused(self, url: str) -> None:
        """http:// to a non-loopback host is refused and the message says how to allow it."""
        message = config_error(token=TOKEN, url=url)
        assert "allow_http=True" in message and "url=" in message and "LOGHANDLER_URL" in message

    def test_plain_http_refused_from_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The refusal names the variable the address came from."""
        monkeypatch.setenv("LOGHANDLER_EU_URL", "http://eu.example")
        message = config_error(token=TOKEN, region="eu")
        assert "LOGHANDLER_EU_URL" in message and "allow_http" in message

    def test_plain_http_allowed_on_request(self) -> None:
        """allow_http=True lets a plain http:// address through."""
        client = Client(TOKEN, url="http://api.example/", allow_http=True)
        assert client.url == "http://api.example"

    @pytest.mark.parametrize(
        "url", ["http://127.0.0.1:9", "http://localhost:9", "http://[::1]:9", "http://127.8.0.1"]
    )
    def test_plain_http_to_loopback_allowed(self, url: str) -> None:
        """Loopback needs no allow_http (local development, the local service)."""
        assert Client(TOKEN, url=url).url == url

    @pytest.mark.parametrize(
        "url", ["api.example", "ftp://api.example", "https://", "https://h/?q=1", "https://h/#f",
                "https://h/a b", "https://user:pw@h", "https://h:99999", "   "],
    )
    def test_bad_base_address(self, url: str) -> None:
        """A malformed base address fails at construction, naming url=."""
        assert "url=" in config_error(token=TOKEN, url=url)

    @pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), "10", True, None])
    def test_bad_timeout(self, timeout: object) -> None:
        """timeout must be a positive finite number."""
        assert "timeout" in config_error(token=TOKEN, url="https://api.example", timeout=timeout)

    @pytest.mark.parametrize("dataset", [None, "", "   ", 5])
    def test_empty_dataset(self, dataset: object) -> None:
        """A missing or empty dataset names dataset= and LOGHANDLER_DATASET."""
        with pytest.raises(ConfigurationError) as info:
            resolve_dataset(dataset)  # type: ignore[arg-type]
        assert "dataset=" in str(info.value) and "LOGHANDLER_DATASET" in str(info.value)

    def test_dataset_from_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """LOGHANDLER_DATASET is used when no dataset is given."""
        monkeypatch.setenv("LOGHANDLER_DATASET", "app-logs")
        assert resolve_dataset(None) == "app-logs"
        assert resolve_dataset("explicit") == "explicit"


class TestRepr:
    def test_settings_hide_token(self) -> None:
        """str() and repr() of Settings never show the token."""
        settings = Client(TOKEN, url="https://api.example", org_id="org-1").settings
        for text in (str(settings), repr(settings), f"{settings}"):
            assert_clean(text)
            assert "***" in text and "org-1" in text
        assert isinstance(settings, Settings) and settings.token == TOKEN

    def test_client_hides_token(self) -> None:
        """repr() of a Client never shows the token."""
        client = Client(PAT, url="https://api.example", org_id="org-1")
        assert_clean(repr(client))
        assert_clean(str(client))
        assert "https://api.example" in repr(client)

    def test_settings_are_frozen(self) -> None:
        """Settings are an immutable value object."""
        settings = Client(TOKEN, url="https://api.example").settings
        with pytest.raises(AttributeError):
            settings.token = "other"  # type: ignore[misc]


class TestShipperArguments:
    def test_client_argument_given_to_the_shipper(self) -> None:
        """Shipper(client, "ds", token=...) says where the token goes, not a dataclass TypeError."""
        client = Client("tkn-1234", url="http://127.0.0.1:9")
        with pytest.raises(ConfigurationError) as info:
            loghandler.Shipper(client, "ds", token="x", url="http://127.0.0.1:8")
        assert str(info.value) == (
            "token=, url= belong to the Client, not the Shipper: pass them to Client(...) and the "
            "client to the Shipper, e.g. Shipper(Client(token=...), dataset)")

    def test_unknown_shipper_option_suggests(self) -> None:
        """A misspelled option names the one meant."""
        client = Client("tkn-1234", url="http://127.0.0.1:9")
        with pytest.raises(ConfigurationError, match=r"did you mean 'batch_size'\?"):
            loghandler.Shipper(client, "ds", batchsize=3)


class TestFieldsArgument:
    """Issue 35.7: ``fields=`` that is not a mapping is the user's mistake, told as such by
    every front end (before: a TypeError from inside configuration, identity's merge)."""

    @pytest.mark.parametrize("front", ["IngestHandler", "IngestProcessor", "IngestSink",
                                       "IngestLogRecordProcessor", "Shipper"])
    @pytest.mark.parametrize("value", [["service"], "service=checkout", 5])
    def test_not_a_mapping_is_a_configuration_error(self, front: str, value: object) -> None:
        import loghandler.opentelemetry

        make = {
            "IngestHandler": loghandler.IngestHandler,
            "IngestProcessor": loghandler.IngestProcessor,
            "IngestSink": loghandler.IngestSink,
            "IngestLogRecordProcessor": loghandler.opentelemetry.IngestLogRecordProcessor,
        }.get(front)
        with pytest.raises(ConfigurationError) as info:
            if make is None:
                loghandler.Shipper(Client(TOKEN, url="http://127.0.0.1:9"), "ds", fields=value)
            else:
                make("ds", url="http://127.0.0.1:9", token=TOKEN, fields=value)
        text = str(info.value)
        assert text.startswith("fields= must be a mapping"), text
        assert repr(value) in text and "{'service': 'checkout'" in text
        assert_clean(text)

    def test_identity_is_named_as_itself(self) -> None:
        with pytest.raises(ConfigurationError, match=r"^identity must be"):
            loghandler.IngestHandler("ds", url="http://127.0.0.1:9", token=TOKEN,
                                     identity=["service"])
        with pytest.raises(ConfigurationError, match=r"^identity=: every key must be a string"):
            loghandler.IngestHandler("ds", url="http://127.0.0.1:9", token=TOKEN,
                                     identity={1: "x"})
