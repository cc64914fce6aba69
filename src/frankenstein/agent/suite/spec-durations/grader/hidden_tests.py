"""Hidden tests for spec-durations: one function per rule of SPEC.md."""


def _p(text):
    from durations import parse_duration
    return parse_duration(text)


def _f(n, style="short"):
    from durations import format_duration
    return format_duration(n, style)


def _invalid(text, exc=ValueError):
    try:
        _p(text)
    except exc:
        return
    raise AssertionError(f"{text!r} should raise {exc.__name__}")


def test_short_units():
    assert [_p(x) for x in ("1w", "1d", "1h", "1m", "1s")] == [604800, 86400, 3600, 60, 1]


def test_long_names_and_case():
    assert _p("2 Weeks") == 1209600
    assert _p("1 DAY") == 86400
    assert _p("3 mins") == 180
    assert _p("4 secs") == 4
    assert _p("1H") == 3600


def test_whitespace_and_empty():
    assert _p("  90s  ") == 90
    _invalid("")
    _invalid("   ")


def test_separators():
    assert _p("1h30m") == 5400
    assert _p("1h 30m") == 5400
    assert _p("1 hour, 30 minutes") == 5400
    assert _p("1 hour,30 minutes") == 5400
    assert _p("2 days and 3 hours") == 183600
    assert _p("1 hour, and 5 minutes") == 3900
    assert _p("1d, 2h and 3m") == 93780


def test_numbers():
    assert _p("1.5 hours") == 5400
    assert _p("1.25m") == 75
    _invalid(".5h")
    _invalid("5.h")
    _invalid("1e3s")
    _invalid("1_000s")


def test_order_and_repeats():
    _invalid("30m 1h")
    _invalid("1h 1h")
    _invalid("1m 2w")


def test_whole_seconds():
    assert _p("0.5m") == 30
    _invalid("1.5s")


def test_negative():
    assert _p("-1h30m") == -5400
    _invalid("- 1h")
    _invalid("1h -30m")


def test_bare_numbers():
    assert _p("0") == 0
    _invalid("90")
    _invalid("1h 30")


def test_unknown_unit_and_garbage():
    _invalid("3 fortnights")
    _invalid("1h30x")
    _invalid("h")


def test_type_errors():
    _invalid(90, TypeError)
    _invalid(None, TypeError)


def test_iso_parse():
    assert _p("P1W") == 604800
    assert _p("P2DT3H") == 183600
    assert _p("PT1H30M") == 5400
    assert _p("PT45S") == 45
    assert _p("-PT90S") == -90


def test_iso_invalid():
    for bad in ("P", "PT", "P1DT", "PT1.5H", "pt1h", "P1H", "PT1D", "P1D2W"):
        _invalid(bad)


def test_format_short():
    assert _f(93784) == "1d 2h 3m 4s"
    assert _f(-90) == "-1m 30s"
    assert _f(0) == "0s"
    assert _f(604800 + 5) == "1w 5s"


def test_format_long():
    assert _f(5400, "long") == "1 hour and 30 minutes"
    assert _f(93784, "long") == "1 day, 2 hours, 3 minutes and 4 seconds"
    assert _f(1209600, "long") == "2 weeks"
    assert _f(0, "long") == "0 seconds"
    assert _f(-90, "long") == "-1 minute and 30 seconds"
    assert _f(61, "long") == "1 minute and 1 second"


def test_format_iso():
    assert _f(1209600, "iso") == "P14D"
    assert _f(93784, "iso") == "P1DT2H3M4S"
    assert _f(0, "iso") == "PT0S"
    assert _f(-90, "iso") == "-PT1M30S"
    assert _f(86400, "iso") == "P1D"
    assert _f(3600, "iso") == "PT1H"


def test_format_errors():
    for bad, exc in ((1.5, TypeError), (True, TypeError), ("5", TypeError)):
        try:
            _f(bad)
        except exc:
            continue
        raise AssertionError(f"format_duration({bad!r}) should raise {exc.__name__}")
    try:
        _f(5, "medium")
    except ValueError:
        pass
    else:
        raise AssertionError("unknown style should raise ValueError")


def test_round_trip():
    values = [0, 1, 59, 60, 61, 3599, 3600, 86399, 86400, 93784, 604799, 604800, 1209601, 987654321]
    for n in values + [-v for v in values]:
        for style in ("short", "long", "iso"):
            assert _p(_f(n, style)) == n, (n, style, _f(n, style))
