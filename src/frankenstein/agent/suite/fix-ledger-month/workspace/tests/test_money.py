import unittest

from ledger.money import format_amount, parse_amount


class MoneyTest(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(parse_amount("1,234.5"), 123450)
        self.assertEqual(parse_amount("-3"), -300)
        self.assertEqual(parse_amount("+0.07"), 7)

    def test_parse_rejects(self):
        for bad in ("", "1.234", "abc", "1,23"):
            with self.assertRaises(ValueError):
                parse_amount(bad)

    def test_format(self):
        self.assertEqual(format_amount(123450), "1,234.50")
        self.assertEqual(format_amount(-7), "-0.07")


if __name__ == "__main__":
    unittest.main()
