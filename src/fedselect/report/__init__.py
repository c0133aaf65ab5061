"""What a set of finished runs reads as: tables (:mod:`fedselect.report.tables`), plots
(:mod:`~fedselect.report.plots`), statistics across seeds (:mod:`~fedselect.report.stats`), the
HTML report (:mod:`~fedselect.report.html`), a sweep's table (:mod:`~fedselect.report.sweep_render`)
and the report of a comparison's directory (:mod:`~fedselect.report.build`)."""
