"""The public surface is what sessionsearch/__init__.py lists, and nothing listed is missing."""

import sessionsearch


def test_everything_in_all_exists_and_the_engine_is_there():
    for name in sessionsearch.__all__:
        assert getattr(sessionsearch, name) is not None
    assert sorted(sessionsearch.__all__) == sessionsearch.__all__
    assert {"Engine", "Settings", "SessionSearchError"} <= set(sessionsearch.__all__)


def test_every_error_in_the_tree_has_a_code_and_descends_from_the_root():
    from sessionsearch import errors

    for name in ("InvalidRequest", "Forbidden", "NotFound", "SearchTimeout", "Unavailable"):
        cls = getattr(errors, name)
        assert issubclass(cls, errors.SessionSearchError) and cls.code and cls.__doc__.startswith("Raised when")
