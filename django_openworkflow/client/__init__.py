"""The front door: starting runs and holding on to them, operating on them, finding them.

:mod:`.runs` starts runs (``spec.run()``, :func:`start_run`) and holds them
(:class:`RunHandle`); :mod:`.operations` cancels, retries and re-runs them;
:mod:`.listing` finds them. Views, the admin, the command line and the HTTP
API all come through here.
"""
