"""ProfileView: choose the hardware profile estimates use, and see which one the estimate used (or the note that
datasheet numbers were used).

Profiles are the ones ``workbench calibrate`` saved for this user and the ones the catalog ships
(:func:`workbench.calibrate.profile.profile_names`). Measuring a new profile starts processes and writes a file, so
the :class:`widgets.calibrate_panel.CalibratePanel` is embedded only when the app was created with
``allow_launch=True``; a measured profile can then be used at once.
"""
from __future__ import annotations

import html

import ipywidgets as ipw

from widgets.common import View, error_html, error_message
from widgets.state import SetProfile
from workbench.calibrate.profile import profile_names

DATASHEET = "datasheet (no profile)"


class ProfileView(View):
    title = "Profile"

    def __init__(self, app=None) -> None:
        self.app = app
        self.choice = ipw.Dropdown(description="profile", options=self._options(), value="",
                                   style={"description_width": "60px"}, layout=ipw.Layout(width="420px"))
        self.choice.add_class("wb-profile-choice")
        self.choice.observe(self._on_choice, names="value")
        self.refresh_button = ipw.Button(description="Reload list", icon="refresh")
        self.refresh_button.on_click(lambda _: self.refresh_names())
        self.used = ipw.HTML()
        self.used.add_class("wb-profile-used")
        self.error = ipw.HTML()
        self.error.add_class("wb-profile-error")
        children = [ipw.HBox([self.choice, self.refresh_button]), self.error, self.used]
        self.calibrate = None
        self.use_measured = None
        if app is not None and app.allow_launch:
            from widgets.calibrate_panel import CalibratePanel

            self.calibrate = CalibratePanel()
            self.use_measured = ipw.Button(description="Use measured profile", icon="check")
            self.use_measured.on_click(lambda _: self.use_profile(self.calibrate.profile))
            children += [ipw.HTML("<h4 style='margin:10px 0 2px'>Measure this machine</h4>"), self.calibrate.widget,
                         self.use_measured]
        else:
            children.append(ipw.HTML(
                "<div style='color:#555;max-width:900px'>Measuring a profile starts processes on the server; this "
                "app was created without <code>allow_launch</code> (dashboard: "
                "<code>WORKBENCH_DASHBOARD_ALLOW_LAUNCH=1</code>). From a shell: <code>workbench calibrate --out "
                "NAME</code>, then choose NAME here.</div>"))
        self.widget = ipw.VBox(children)
        self._syncing = False

    @staticmethod
    def _options() -> list:
        return [(DATASHEET, "")] + [(n, n) for n in profile_names()]

    def refresh_names(self) -> None:
        current = self.choice.value
        self._syncing = True
        try:
            options = self._options()
            self.choice.options = options
            self.choice.value = current if current in [v for _, v in options] else ""
        finally:
            self._syncing = False

    def _on_choice(self, change) -> None:
        if self._syncing or self.app is None:
            return
        profile = change["new"] or None
        if profile is not None:  # a file that is no profile is refused here, and the choice goes back to what is used
            from workbench.calibrate.profile import load_profile

            try:
                profile = load_profile(profile)  # read once: the reducer takes the profile itself
            except ValueError as exc:
                self._syncing = True
                try:
                    self.choice.value = change["old"] if change["old"] in [v for _, v in self.choice.options] else ""
                finally:
                    self._syncing = False
                self.error.value = error_html(error_message(exc), max_width="900px")
                return
        self.error.value = ""
        self.app.dispatch(SetProfile(profile=profile))

    def use_profile(self, profile) -> None:
        """Estimate with ``profile`` (a HardwareProfile, a name, or ``None`` for datasheet numbers)."""
        if self.app is not None and (profile is not None or self.app.state.profile is not None):
            self.app.dispatch(SetProfile(profile=profile))

    def show(self, state) -> None:
        record = getattr(state.estimate, "profile", None) or {}
        name = record.get("name")
        chosen = getattr(state.profile, "name", None)
        head = (f"Estimates use the hardware profile <b>{html.escape(str(name))}</b>." if name
                else "Estimates use <b>datasheet numbers</b> (no profile).")
        text = (f"<div style='max-width:900px'>{head}<br><span style='color:#555'>"
                f"{html.escape(record.get('note', ''))}</span></div>")
        if chosen and chosen != name:
            text += (f"<div style='color:#b00020'>Profile {html.escape(chosen)} is not applied: "
                     f"{html.escape(state.error)}</div>")
        if self.used.value != text:
            self.used.value = text
        if chosen and chosen.lower() in [v for _, v in self.choice.options] and self.choice.value != chosen.lower():
            self._syncing = True
            try:
                self.choice.value = chosen.lower()
            finally:
                self._syncing = False

    def close(self) -> None:
        if self.calibrate is not None:
            self.calibrate.close()
        super().close()
