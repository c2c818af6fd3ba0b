"""coerce: the collection's one rule for booleans, integers and release versions (exact values; each case kills a
mutant of scripts/mutation.sh validators that the plan tests did not)."""
import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.common import coerce


@pytest.mark.parametrize("value", [True, "true", "True", " TRUE ", "yes", "Yes", "on", "ON", "1", " 1 ", 1, 2, -1])
def test_true_values(value):
    assert coerce.to_bool(value) is True


@pytest.mark.parametrize("value", [False, "false", "FALSE", " no ", "No", "off", "Off", "0", "", "  ", 0])
def test_false_values(value):
    assert coerce.to_bool(value) is False


@pytest.mark.parametrize("value", ["y", "n", "maybe", "2", "true please", None, 1.0, 0.0, [], {}])
def test_anything_else_is_refused_with_the_value_named(value):
    with pytest.raises(ValueError) as exc:
        coerce.to_bool(value)
    assert str(exc.value) == "not a boolean: %r" % (value,)


def test_the_word_lists_are_exact():
    assert coerce.TRUE_WORDS == ("true", "yes", "on", "1")
    assert coerce.FALSE_WORDS == ("false", "no", "off", "0", "")


@pytest.mark.parametrize("value, expected", [(8000, 8000), ("8000", 8000), (" 42 ", 42), (0, 0), (-3, -3), (7.9, 7)])
def test_to_int(value, expected):
    got = coerce.to_int(value)
    assert got == expected and isinstance(got, int) and not isinstance(got, bool)


@pytest.mark.parametrize("value", [True, False])
def test_to_int_refuses_booleans(value):
    with pytest.raises(ValueError) as exc:
        coerce.to_int(value)
    assert str(exc.value) == "boolean is not an integer"


@pytest.mark.parametrize("value", ["eight", "", None, "1.5"])
def test_to_int_refuses_words(value):
    with pytest.raises((ValueError, TypeError)):
        coerce.to_int(value)


@pytest.mark.parametrize("version, key", [
    ("0.28.0", (0, 28, 0)), ("0.28", (0, 28)), ("1", (1,)), (0.28, (0, 28)), ("0.28.0rc1", (0, 28, 0)),
    ("0.28.1.dev3+gabc", (0, 28, 1, 0)), ("v1.2", (0, 2)), ("12.345.6789", (12, 345, 6789)),
    ("x.y", (0, 0)), ("", (0,)), ("10.0", (10, 0))])
def test_version_key(version, key):
    assert coerce.version_key(version) == key


def test_version_key_orders_numerically_not_as_text():
    assert coerce.version_key("0.9.2") < coerce.version_key("0.10.0") < coerce.version_key("0.28.0")


TABLE = {"0.20.0": "a", "0.28.0": "b", "0.9.0": "old", "1.0": "c"}


@pytest.mark.parametrize("version, expected", [
    ("0.8.9", None), ("0.9.0", "old"), ("0.19.9", "old"), ("0.20.0", "a"), ("0.27.5", "a"), ("0.28.0", "b"),
    ("0.29.1", "b"), ("1.0.0", "c"), ("2", "c")])
def test_pick_versioned_takes_the_greatest_key_at_or_below(version, expected):
    assert coerce.pick_versioned(TABLE, version) == expected


def test_pick_versioned_of_an_empty_table_is_none():
    assert coerce.pick_versioned({}, "0.28.0") is None
