"""A bot's `replies:`: its fixed texts in its customers' language, checked when the file is read."""

from __future__ import annotations

import pytest

from gateway.errors import ConfigError
from gateway.settings import load_settings
from tests.conftest import write_config
from tests.english_replies import FAILURE_REPLY, LLM_DOWN_REPLY, SEARCH_DOWN_REPLY, TEXT_ONLY_REPLY

SPANISH = {
    "greeting": "¡Hola! Pregúntame lo que quieras sobre nuestros productos.",
    "text_only": "Por ahora solo puedo leer mensajes de texto. ¿Puedes escribir tu pregunta?",
    "too_long": "Tu mensaje es demasiado largo ({chars} caracteres). ¿Puedes preguntarlo en menos de {limit}?",
    "llm_down": "Lo siento, ahora mismo no puedo responder.",
    "search_down": "Lo siento, ahora mismo no puedo buscarlo.",
    "failure": "Lo siento, algo ha fallado al responder.",
    "budget_spent": "Lo siento, hoy no puedo responder más preguntas.",
    "person_will_help": "He pedido a una persona de nuestro equipo que te ayude.",
    "try_again": "Por favor, inténtalo de nuevo dentro de un rato.",
    "ask_tomorrow": "Por favor, vuelve a preguntar mañana.",
    "holding": "Una persona de nuestro equipo lleva esta conversación y te responderá aquí.",
    "sources_heading": "Fuentes:",
    "lang": "es",
}


def _load(tmp_path, replies):
    return load_settings(write_config(tmp_path, bots=[{"name": "tienda", "channels": {"web": {}}, "replies": replies}]))


def test_every_reply_loads_in_spanish_and_says_its_outages_with_or_without_a_person(tmp_path):
    replies = _load(tmp_path, SPANISH).bots[0].replies
    assert replies.too_long_reply(chars=5000, limit=4000) == (
        "Tu mensaje es demasiado largo (5000 caracteres). ¿Puedes preguntarlo en menos de 4000?")
    assert replies.outage("llm_down", escalates=True) == (
        "Lo siento, ahora mismo no puedo responder. He pedido a una persona de nuestro equipo que te ayude.")
    assert replies.outage("search_down", escalates=False) == (
        "Lo siento, ahora mismo no puedo buscarlo. Por favor, inténtalo de nuevo dentro de un rato.")
    assert replies.outage("budget_spent", escalates=False) == (
        "Lo siento, hoy no puedo responder más preguntas. Por favor, vuelve a preguntar mañana.")


def test_a_bot_without_replies_says_what_it_always_said(tmp_path):
    replies = load_settings(write_config(tmp_path)).bots[0].replies
    assert replies.text_only == TEXT_ONLY_REPLY and replies.sources_heading == "Sources:"
    assert replies.outage("llm_down", escalates=True) == LLM_DOWN_REPLY
    assert replies.outage("search_down", escalates=True) == SEARCH_DOWN_REPLY
    assert replies.outage("failure", escalates=True) == FAILURE_REPLY
    assert replies.too_long_reply(chars=5000, limit=4000) == (
        "That message is too long for me to read (5,000 characters). Could you ask your question in fewer "
        "than 4,000 characters?")


@pytest.mark.parametrize(("too_long", "problem"), [
    ("Demasiado largo ({caracteres} caracteres).", "unknown placeholder {caracteres}; the placeholders are "
                                                   "{chars}, {limit}"),
    ("Demasiado largo ({}).", "unknown placeholder {}"),
    ("Demasiado largo ({chars.real}).", "unknown placeholder {chars.real}"),
    ("Demasiado largo {chars caracteres.", "not a valid template"),
    ("Demasiado largo ({chars:.x}).", "not a valid template"),
])
def test_a_too_long_reply_with_a_placeholder_it_cannot_fill_is_a_config_error_naming_the_key(
        tmp_path, too_long, problem):
    """It loaded, and every too-long message then failed to be answered."""
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, {"too_long": too_long})
    assert caught.value.key == "bots[0].replies.too_long" and problem in caught.value.problem


@pytest.mark.parametrize(("replies", "key", "problem"), [
    ({"after_hours": "Volvemos {dia} a las {time}."}, "after_hours",
     "unknown placeholder {dia}; the placeholders are {start}, {end}, {timezone}, {day}, {time}"),
    ({"day_names": ["lunes", "martes", "miércoles", "jueves", "viernes"]}, "day_names",
     "needs 7 names, Monday first; it has 5"),
])
def test_an_off_hours_note_that_cannot_be_filled_is_a_config_error_naming_the_key(tmp_path, replies, key, problem):
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, replies)
    assert (caught.value.key, caught.value.problem) == (f"bots[0].replies.{key}", problem)


@pytest.mark.parametrize("key", ["text_only", "sources_heading", "llm_down"])
def test_an_empty_reply_is_a_config_error_naming_the_key(tmp_path, key):
    """Sent as written: every platform refuses an empty message, and the customer got nothing."""
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, {key: "  "})
    assert caught.value.key == f"bots[0].replies.{key}" and caught.value.problem.startswith("is empty")


def test_an_outage_without_its_second_sentence_is_the_first_alone(tmp_path):
    replies = _load(tmp_path, {"llm_down": "Ahora no puedo responder.", "person_will_help": ""}).bots[0].replies
    assert replies.outage("llm_down", escalates=True) == "Ahora no puedo responder."


def test_the_widgets_words_load_and_its_unknown_keys_and_placeholders_are_config_errors(tmp_path):
    widget = {"placeholder": "Escribe tu pregunta…", "too_long": "Máximo {limit} caracteres; tienes {chars}."}
    assert _load(tmp_path, {"widget": widget}).bots[0].replies.widget.placeholder == "Escribe tu pregunta…"
    for texts, key, problem in (({"boton": "Enviar"}, "boton", "unknown key"),
                                ({"too_long": "Máximo {limite}."}, "too_long", "unknown placeholder {limite}")):
        with pytest.raises(ConfigError) as caught:
            _load(tmp_path, {"widget": texts})
        assert caught.value.key == f"bots[0].replies.widget.{key}" and caught.value.problem.startswith(problem)


def test_an_unknown_key_under_replies_is_a_config_error_naming_it(tmp_path):
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, {"sources_title": "Fuentes:"})
    assert (caught.value.key, caught.value.problem) == ("bots[0].replies.sources_title", "unknown key")


def test_the_web_chats_refusals_and_discords_other_command_answer_load_and_are_checked(tmp_path):
    """They were English, whatever the bot's `replies:`; their placeholders are checked like the others'."""
    english = load_settings(write_config(tmp_path)).bots[0].replies
    assert (english.use_ask, english.web_too_long.format(chars=5, limit=4),
            english.web_rate_limited.format(per_minute=60)) == (
        "Please use /ask.", "text is 5 characters; the limit is 4",
        "more than 60 messages a minute from this address; wait a minute")
    spanish = {"use_ask": "Usa /ask.", "web_too_long": "{chars} caracteres; el máximo es {limit}",
               "web_rate_limited": "Más de {per_minute} mensajes por minuto; espera un minuto"}
    assert _load(tmp_path, spanish).bots[0].replies.web_rate_limited == spanish["web_rate_limited"]
    for key, text, problem in (("web_too_long", "{caracteres}", "unknown placeholder {caracteres}; the placeholders "
                                                                "are {chars}, {limit}"),
                               ("web_rate_limited", "{limit} por minuto", "unknown placeholder {limit}; the "
                                                                          "placeholders are {per_minute}"),
                               ("use_ask", " ", "is empty")):
        with pytest.raises(ConfigError) as caught:
            _load(tmp_path, {key: text})
        assert caught.value.key == f"bots[0].replies.{key}" and caught.value.problem.startswith(problem)


@pytest.mark.parametrize("lang", ["es", "pt-BR", "zh-Hant-TW", "es-419", "de-CH-1901", "en-US-x-twain", "x-klingon"])
def test_a_bcp_47_language_tag_loads(tmp_path, lang):
    assert _load(tmp_path, {"lang": lang}).bots[0].replies.lang == lang


@pytest.mark.parametrize("lang", ["", "español", "castellano", "es_ES", "es-", "e", "pt-BRA-", "en US", "<es>"])
def test_a_language_that_is_no_bcp_47_tag_is_a_config_error_naming_the_key(tmp_path, lang):
    """It is the widget page's `<html lang>`: "es_ES" or "español" there are read by no screen reader."""
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, {"lang": lang})
    assert caught.value.key == "bots[0].replies.lang" and "is not a BCP 47 language tag" in caught.value.problem


def test_a_use_ask_longer_than_discord_takes_is_a_config_error(tmp_path):
    """It is an interaction's answer, sent as written and unsplit: over 2000 characters, Discord refused it and
    the member saw "The application did not respond"."""
    assert _load(tmp_path, {"use_ask": "u" * 2000}).bots[0].replies.use_ask == "u" * 2000
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, {"use_ask": "u" * 2001})
    assert caught.value.key == "bots[0].replies.use_ask" and "2001 characters" in caught.value.problem
