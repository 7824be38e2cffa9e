"""The rules of a catalogue read from KATalogus (core/catalogue.py): new boefjes, run_on, who may scan
what, which organisations a listing retires or brings back."""

from __future__ import annotations

from baton.core.catalogue import (
    ListedPlugin,
    is_rescanned,
    may_scan,
    newly_enabled,
    organisations_to_restore,
    organisations_to_retire,
    runs_on,
    scan_levels_for,
)


def boefje(plugin_id: str, *, enabled: bool = True, consumes: tuple[str, ...] = ("Hostname",)) -> ListedPlugin:
    return ListedPlugin(id=plugin_id, type="boefje", name=plugin_id, enabled=enabled, consumes=consumes)


def test_a_boefje_is_new_when_the_listing_enables_what_the_recorded_one_did_not() -> None:
    listing = [
        boefje("was-on"),
        boefje("was-off"),
        boefje("never-seen"),
        boefje("still-off", enabled=False),
        boefje("consumes-nothing", consumes=()),
        ListedPlugin(id="norm", type="normalizer", name="n", enabled=True, consumes=("text/html",)),
    ]
    recorded = {"was-on": True, "was-off": False, "still-off": False}
    assert [plugin.id for plugin in newly_enabled(recorded, listing)] == ["was-off", "never-seen"]


def test_with_nothing_recorded_every_enabled_boefje_is_new_and_after_that_none() -> None:
    listing = [boefje("a"), boefje("b"), boefje("c", enabled=False)]
    assert [plugin.id for plugin in newly_enabled({}, listing)] == ["a", "b"]
    recorded = {plugin.id: plugin.enabled for plugin in listing}
    assert newly_enabled(recorded, listing) == []


def test_run_on_limits_a_boefje_to_the_operations_it_lists() -> None:
    assert runs_on(None, "create") and runs_on(None, "update") and runs_on([], "update")
    assert runs_on(["create"], "create") and not runs_on(["create"], "update")
    assert runs_on(["create", "update"], "update")
    assert is_rescanned(None) and not is_rescanned(["update"])


def test_a_boefje_may_scan_a_consumed_type_at_its_level_or_above() -> None:
    assert may_scan(["Hostname"], 2, "Hostname", 2)
    assert may_scan(["Hostname"], 2, "Hostname", 4)
    assert not may_scan(["Hostname"], 2, "Hostname", 1)
    assert not may_scan(["Hostname"], 0, "IPAddressV4", 4)
    assert list(scan_levels_for(2)) == [2, 3, 4] and list(scan_levels_for(0)) == [0, 1, 2, 3, 4]


def test_a_listing_retires_only_what_katalogus_made_and_no_longer_lists() -> None:
    assert organisations_to_retire({"acme"}, {"acme", "gone"}) == {"gone"}
    assert organisations_to_retire({"acme", "new"}, {"acme"}) == set()


def test_an_empty_listing_retires_nothing() -> None:
    assert organisations_to_retire(set(), {"acme", "beta"}) == set()


def test_a_retired_organisation_listed_again_comes_back() -> None:
    assert organisations_to_restore({"acme", "back"}, {"back", "still-gone"}) == {"back"}
    assert organisations_to_restore(set(), {"gone"}) == set()


def test_a_listed_plugins_definition_is_what_every_organisation_shares() -> None:
    plugin = ListedPlugin(
        id="dns",
        type="boefje",
        name="DNS",
        enabled=True,
        consumes=("Hostname",),
        scan_level=1,
        version="1.2",
        oci_image="ghcr.io/x/dns:1.2",
        cron="0 * * * *",
        interval=60,
        run_on=("create",),
    )
    assert plugin.definition() == {
        "type": "boefje",
        "name": "DNS",
        "consumes": ["Hostname"],
        "scan_level": 1,
        "version": "1.2",
        "oci_image": "ghcr.io/x/dns:1.2",
        "cron": "0 * * * *",
        "interval": 60,
        "run_on": ["create"],
    }
