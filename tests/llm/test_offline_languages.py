"""The offline responder answers from a help center written in Spanish, Arabic, Chinese or Hindi.

Only capitals started a sentence, and only ". ", "! ", "? " ended one: an Arabic, Chinese or Hindi
paragraph, which has no capitals, was dropped whole as "starts mid-sentence", so the responder had
nothing to quote and gave every such question the fallback text; a Spanish "¿…?" was glued to the
sentence before it. Chinese, written without spaces, is matched by its character pairs.
"""

from __future__ import annotations

import pytest

from gateway.llm import LLMRouter
from gateway.offline.provider import split_sentences
from gateway.pipeline.citations import verify_citations
from gateway.pipeline.prompts import build_messages
from gateway.settings import BotSettings
from tests.llm.hits import FakeHit

BOT = BotSettings(name="demo", fallback_text="Sorry, our help center does not cover that.")

PAGES = {
    "es": ("Si olvidaste tu contraseña, puedes restablecerla desde la página de inicio de sesión. ¿No recibes el "
           "correo? Revisa la carpeta de spam.\n\nEl plan Plus cuesta 6 € al mes. El plan Team cuesta 12 € al mes."),
    "ar": ("إذا نسيت كلمة المرور، يمكنك إعادة تعيينها من صفحة تسجيل الدخول. لم تصلك الرسالة؟ تحقق من مجلد الرسائل غير "
           "المرغوب فيها.\n\nتكلفة خطة Plus هي 6 دولارات شهريًا. تكلفة خطة Team هي 12 دولارًا شهريًا."),
    "zh": "如果您忘记了密码，可以在登录页面重置。没有收到邮件？请检查垃圾邮件文件夹。\n\nPlus 计划每月 6 美元。Team 计划每月 12 美元。",
    "hi": ("अगर आप अपना पासवर्ड भूल गए हैं, तो आप इसे लॉगिन पेज से रीसेट कर सकते हैं। ईमेल नहीं मिला? स्पैम फ़ोल्डर "
           "देखें।\n\nPlus प्लान की कीमत 6 डॉलर प्रति माह है। Team प्लान की कीमत 12 डॉलर प्रति माह है।"),
}
SENTENCES = {
    "es": ["Si olvidaste tu contraseña, puedes restablecerla desde la página de inicio de sesión.", "¿No recibes el correo?",
           "Revisa la carpeta de spam.", "El plan Plus cuesta 6 € al mes.", "El plan Team cuesta 12 € al mes."],
    "ar": ["إذا نسيت كلمة المرور، يمكنك إعادة تعيينها من صفحة تسجيل الدخول.", "لم تصلك الرسالة؟",
           "تحقق من مجلد الرسائل غير المرغوب فيها.", "تكلفة خطة Plus هي 6 دولارات شهريًا.",
           "تكلفة خطة Team هي 12 دولارًا شهريًا."],
    "zh": ["如果您忘记了密码，可以在登录页面重置。", "没有收到邮件？", "请检查垃圾邮件文件夹。", "Plus 计划每月 6 美元。",
           "Team 计划每月 12 美元。"],
    "hi": ["अगर आप अपना पासवर्ड भूल गए हैं, तो आप इसे लॉगिन पेज से रीसेट कर सकते हैं।", "ईमेल नहीं मिला?",
           "स्पैम फ़ोल्डर देखें।", "Plus प्लान की कीमत 6 डॉलर प्रति माह है।", "Team प्लान की कीमत 12 डॉलर प्रति माह है।"],
}
QUESTIONS = {  # (a question about the password, the words its answer holds)
    "es": ("¿Cómo puedo restablecer mi contraseña?", "restablecerla desde la página de inicio de sesión [1]."),
    "ar": ("كيف يمكنني إعادة تعيين كلمة المرور؟", "من صفحة تسجيل الدخول [1]."),
    "zh": ("如何重置密码？", "可以在登录页面重置 [1]。"),
    "hi": ("पासवर्ड कैसे रीसेट करें?", "लॉगिन पेज से रीसेट कर सकते हैं [1]।"),
}


@pytest.mark.parametrize("lang", sorted(PAGES))
def test_sentences_of_a_page_in_another_language(lang: str) -> None:
    assert split_sentences(PAGES[lang]) == SENTENCES[lang]


@pytest.mark.parametrize("lang", sorted(PAGES))
async def test_the_offline_responder_answers_from_a_page_in_another_language(lang: str) -> None:
    hit = FakeHit(text=PAGES[lang], source=f"{lang}/account.md", title="Account", chunk_id=f"{lang}-0")
    question, answer = QUESTIONS[lang]
    messages = build_messages(BOT, history=[], user_text=question, hits=[hit])

    result = await LLMRouter([]).complete(model="offline", messages=messages)

    assert answer in result.text, result.text
    verified = verify_citations(result.text, [hit], fallback_text=BOT.fallback_text)
    assert answer in verified.text and [c.source for c in verified.citations] == [f"{lang}/account.md"]
