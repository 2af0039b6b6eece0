"""Parameter parsing and type checks against a notebook's ``parameters`` cell (no kernel is started)."""
from pathlib import Path

import pytest

from workbench.jobs.parameters import check_parameters, check_value, notebook_parameters, resolve_text

NB = Path(__file__).parent / "data" / "notebooks"


def test_reads_annotations_defaults_and_help():
    params = notebook_parameters(NB / "params.ipynb")
    assert list(params) == ["x", "scale", "label", "flag"]
    assert params["x"] == {"type": "int", "default": "2", "help": "a whole number"}
    assert params["label"]["type"] == "str"


def test_text_values_resolve_like_papermill():
    assert resolve_text("True") is True and resolve_text("False") is False and resolve_text("None") is None
    assert resolve_text("3") == 3 and isinstance(resolve_text("3"), int)
    assert resolve_text("2.5") == 2.5 and resolve_text("abc") == "abc"


def test_text_values_checked_against_annotations():
    typed = check_parameters(NB / "params.ipynb", {"x": "4", "scale": "2", "label": "7", "flag": "True"},
                             from_text=True)
    assert typed == {"x": 4, "scale": 2.0, "label": "7", "flag": True}
    assert isinstance(typed["scale"], float) and isinstance(typed["label"], str)


@pytest.mark.parametrize("name,value,message", [
    ("x", "2.5", "parameter x expects int, got '2.5'"),
    ("x", "abc", "parameter x expects int, got 'abc'"),
    ("flag", "1", "parameter flag expects bool (True or False), got '1'"),
    ("scale", "fast", "parameter scale expects float, got 'fast'"),
])
def test_wrong_type_is_one_clear_line(name, value, message):
    with pytest.raises(ValueError) as err:
        check_parameters(NB / "params.ipynb", {name: value}, from_text=True)
    assert str(err.value) == message


def test_unknown_name_lists_the_notebooks_parameters():
    with pytest.raises(ValueError, match=r"unknown parameter 'y' .*\(its parameters: x, scale, label, flag\)"):
        check_parameters(NB / "params.ipynb", {"y": 1})


def test_yaml_values_are_checked_too():
    assert check_value("x", 3, "int") == 3
    assert check_value("scale", 3, "float") == 3.0
    with pytest.raises(ValueError, match="expects int"):
        check_value("x", True, "int")
    with pytest.raises(ValueError, match="expects str"):
        check_value("label", 3, "str")
    assert check_value("n", None, "Optional[int]") is None
    assert check_value("n", "None", "int | None", from_text=True) is None
    assert check_value("n", "5", "int | None", from_text=True) == 5
    assert check_value("cfg", {"a": 1}, "dict") == {"a": 1}  # other annotations pass unchecked


def test_missing_notebook():
    with pytest.raises(ValueError, match="does not exist"):
        notebook_parameters(NB / "nope.ipynb")
