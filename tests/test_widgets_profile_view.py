"""Profile tab: choosing a saved profile goes through the reducer into the estimate, the tab says which profile (or
the datasheet note) the estimate used, a profile for another GPU is refused inline, and the calibration panel is
there only when launching is allowed."""
import pytest

from test_calibrate_profile import h200_profile
from widgets.app import Workbench
from widgets.profile_view import DATASHEET, ProfileView
from widgets.state import SetCluster, SetProfile, initial_state, reduce
from workbench.calibrate import NO_PROFILE_NOTE
from workbench.calibrate.profile import user_profiles_dir


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))


def profile_view(app) -> ProfileView:
    return next(v for v in app.views if isinstance(v, ProfileView))


def test_reducer_applies_and_drops_a_profile():
    s = initial_state()
    assert s.estimate.profile["name"] is None and s.estimate.profile["note"].startswith(NO_PROFILE_NOTE)
    s = reduce(s, SetCluster(changes={"gpu": "H200"}))
    with_profile = reduce(s, SetProfile(profile=h200_profile(emax=0.4)))
    assert with_profile.valid and with_profile.estimate.profile["name"] == "h200-test"
    assert with_profile.estimate.time.step_seconds > s.estimate.time.step_seconds  # lower measured GEMM curve
    back = reduce(with_profile, SetProfile(profile=None))
    assert back.estimate.profile["name"] is None and back.profile is None
    unknown = reduce(s, SetProfile(profile="no-such-profile"))
    assert not unknown.valid and "unknown profile='no-such-profile'" in unknown.error
    assert unknown.error_source == "estimate" and unknown.profile is None


def test_profile_tab_chooses_a_saved_profile_and_says_which_is_used():
    h200_profile(emax=0.4).save(user_profiles_dir() / "h200-test.json")
    app = Workbench()
    view = profile_view(app)
    assert view.calibrate is None and "allow_launch" in view.widget.children[-1].value
    app.view_tabs.selected_index = app.views.index(view)
    assert "datasheet numbers" in view.used.value and "datasheet numbers" in app.banner.value
    assert ("h200-test", "h200-test") in view.choice.options and view.choice.options[0] == (DATASHEET, "")
    # the profile was measured on an H200: on the A100 cluster it is refused inline, the estimate keeps datasheet
    view.choice.value = "h200-test"
    assert not app.state.valid and "measured on H200" in app.state.error
    assert "is not applied" in view.used.value and "measured on H200" in app.banner.value
    hw = next(p for p in app.panels if p.title == "Hardware")
    hw.controls["gpu"].value = "H200"
    assert app.state.valid and app.state.estimate.profile["name"] == "h200-test"
    assert "hardware profile <b>h200-test</b>" in view.used.value and "memory bandwidth" in view.used.value
    assert "profile h200-test" in app.banner.value
    view.choice.value = ""
    assert app.state.profile is None and "datasheet numbers" in view.used.value
    app.close()


def test_calibration_panel_only_with_launch_allowed():
    app = Workbench(allow_launch=True)
    view = profile_view(app)
    assert view.calibrate is not None and view.use_measured is not None
    assert view.calibrate.widget in view.widget.children
    app.close()


def test_a_profile_file_that_is_no_profile_is_refused_in_the_tab():
    """A saved file that is not a profile's JSON: the Profile tab says so and the choice goes back to what the
    estimate uses; no other panel shows an error for it."""
    user_profiles_dir().mkdir(parents=True, exist_ok=True)
    (user_profiles_dir() / "broken.json").write_text("[1, 2]")
    app = Workbench()
    view = profile_view(app)
    app.view_tabs.selected_index = app.views.index(view)
    view.refresh_names()
    view.choice.value = "broken"
    assert "holds a JSON list, not a profile's object" in view.error.value
    assert view.choice.value == "" and app.state.valid and app.state.profile is None
