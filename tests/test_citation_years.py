"""Works that an author-year citation would print alike are lettered in order of publication."""

import importlib.util
import pathlib

from pybtex.database import parse_string

ROOT = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("citation_years", ROOT / "book/_ext/citation_years.py")
citation_years = importlib.util.module_from_spec(spec)
spec.loader.exec_module(citation_years)


def test_letters_follow_the_arxiv_dates_not_the_titles():
    """Alphabetically "Distributed ..." comes first; it was released nine months later."""
    bib = parse_string("""
@inproceedings{efficient, title = {Efficient Estimation of Word Representations},
  author = {Mikolov, Tomas and Chen, Kai and Corrado, Greg and Dean, Jeffrey}, year = {2013},
  url = {https://arxiv.org/abs/1301.3781}}
@inproceedings{distributed, title = {Distributed Representations of Words and Phrases},
  author = {Mikolov, Tomas and Sutskever, Ilya and Chen, Kai}, year = {2013},
  url = {https://arxiv.org/abs/1310.4546}}
@article{other, title = {A Paper of Another Year}, author = {Mikolov, Tomas and Chen, Kai and X, Y},
  year = {2014}}
""", "bibtex")
    years = citation_years.letter_years(bib.entries)
    assert years == {"efficient": "2013a", "distributed": "2013b", "other": "2014"}


def test_the_books_own_pairs_are_lettered_by_date():
    bib = parse_string((ROOT / "book/references.bib").read_text(), "bibtex")
    years = citation_years.letter_years(bib.entries)
    assert (years["mikolov2013efficient"], years["mikolov2013distributed"]) == ("2013a", "2013b")
    assert (years["touvron2023llama"], years["touvron2023llama2"]) == ("2023a", "2023b")
