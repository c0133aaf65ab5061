"""What a set of finished runs reads as: the runs as a report reads them (:mod:`fedselect.report.runs`),
their federations (:mod:`~fedselect.report.federations`), figures over seeds (:mod:`~fedselect.report.aggregate`),
statistics across seeds (:mod:`~fedselect.report.stats`), the Markdown and CSV tables
(:mod:`~fedselect.report.tables`), plots (:mod:`~fedselect.report.plots`), the HTML report
(:mod:`~fedselect.report.html`, its pages :mod:`~fedselect.report.compare_html` and
:mod:`~fedselect.report.sweep_html`), a sweep's table (:mod:`~fedselect.report.sweep_render`) and the report
of a comparison's directory (:mod:`~fedselect.report.build`)."""
