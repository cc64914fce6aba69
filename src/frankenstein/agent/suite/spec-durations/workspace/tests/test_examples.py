import unittest

from durations import format_duration, parse_duration


class Examples(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(parse_duration("1h30m"), 5400)
        self.assertEqual(parse_duration("2 days and 3 hours"), 183600)
        self.assertEqual(parse_duration("PT45S"), 45)

    def test_format(self):
        self.assertEqual(format_duration(93784), "1d 2h 3m 4s")
        self.assertEqual(format_duration(5400, "long"), "1 hour and 30 minutes")
        self.assertEqual(format_duration(1209600, "iso"), "P14D")


if __name__ == "__main__":
    unittest.main()
