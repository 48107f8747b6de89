"""The single-instance socket's name per user: Windows' named pipes are one namespace for every user of the machine,
so two users whose names differ only in characters a pipe name cannot take ('Дима', 'Юлия': both `____`) must not
share one. The user is set the way getpass reads it (LOGNAME / USER / USERNAME). Not here: the asking and answering
(test_single_instance_and_main.py)."""

from __future__ import annotations

import uuid

from strata.app.single_instance import SingleInstance, ask_running_instance, instance_name


def name_for(monkeypatch, user: str, suffix: str = "") -> str:
    for variable in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(variable, user)
    return instance_name(suffix)


def test_users_whose_names_a_pipe_name_cannot_take_get_names_of_their_own(monkeypatch, qtbot):
    assert name_for(monkeypatch, "alice") == "strata-app-alice"        # an ASCII name is as before
    assert name_for(monkeypatch, "j.doe-2") == "strata-app-j.doe-2"
    suffix = "-test-" + uuid.uuid4().hex[:8]
    dima, yulia = name_for(monkeypatch, "Дима", suffix), name_for(monkeypatch, "Юлия", suffix)
    assert dima != yulia and dima.startswith("strata-app-____-test-") and yulia.startswith("strata-app-____-test-")
    assert name_for(monkeypatch, "Дима", suffix) == dima                 # the same user finds their own app
    first = SingleInstance(dima, lambda: True)
    try:
        assert ask_running_instance(yulia, timeout_ms=200) is None        # Юлия's launch finds no app of hers
        second = SingleInstance(yulia, lambda: True)
        second.close()
    finally:
        first.close()


def test_on_windows_two_accounts_of_one_user_name_in_two_domains_get_names_of_their_own(monkeypatch):
    """CORP\\alice and the machine's own alice share USERNAME (what getpass reads) on a shared or remote-desktop
    machine, and the pipe namespace is the machine's: the domain (USERDOMAIN) is part of the name there."""
    for variable in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(variable, "alice")
    monkeypatch.setenv("USERDOMAIN", "CORP")
    corp = instance_name(windows=True)
    monkeypatch.setenv("USERDOMAIN", "DESKTOP-7Q2")
    local = instance_name(windows=True)
    assert corp != local and corp.startswith("strata-app-CORP_alice-") and local.startswith("strata-app-DESKTOP-7Q2_alice-")
    assert instance_name(windows=True) == local                         # the same account finds its own app
    assert instance_name(windows=False) == "strata-app-alice"           # elsewhere USERDOMAIN means nothing
    monkeypatch.delenv("USERDOMAIN")
    assert instance_name(windows=True) == "strata-app-alice"
