"""The nb run HTML report: titled by the parameters it ran with, and a widget cell shows its static fallback."""
import nbformat

from workbench.jobs.nbrun import export_html, report_title


def test_report_title_and_widget_fallback(tmp_path):
    from widgets.app import Workbench

    app = Workbench()
    bundle = app._repr_mimebundle_()
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_markdown_cell("# Quickstart on the guide's 13B example"))
    cell = nbformat.v4.new_code_cell("Workbench()")
    cell.outputs = [nbformat.v4.new_output("display_data", data=bundle)]
    nb.cells.append(cell)
    path = tmp_path / "quickstart.ipynb"
    nbformat.write(nb, str(path))
    out = tmp_path / "report.html"
    export_html(path, out, {"model": "llama3-8b"})
    text = out.read_text()
    assert "<title>quickstart: model=llama3-8b</title>" in text
    assert "Ran with parameters" in text and "llama3-8b" in text
    assert "Static snapshot of the interactive workbench" in text and "Memory per GPU (GiB)" in text
    assert report_title("quickstart", {}) == "quickstart (default parameters)"
    app.close()
