from __future__ import annotations

import pytest
from django.test import Client

from pipelines.config import EngineConfig


def test_the_defaults_are_named_for_people():
    text = EngineConfig().describe()
    assert "speech to text Whisper tiny.en" in text
    assert "answers Qwen2.5-Coder-0.5B-Instruct on llama.cpp" in text
    assert "voice Piper en_US-joe-medium (piper)" in text


def test_each_packaged_model_a_setting_chooses_is_named():
    assert "speech to text Whisper base;" in EngineConfig(stt_model="base").describe()
    assert "answers SmolLM2-135M-Instruct on transformers" in EngineConfig(lm_backend="transformers").describe()


def test_models_an_operator_points_at_are_named_by_their_file_or_folder():
    config = EngineConfig(
        stt_model="/models/faster-whisper-large-v3/", lm_backend="transformers", lm_model="/models/Qwen2.5-7B-Instruct"
    )
    text = config.describe()
    assert "faster-whisper-large-v3" in text and "Qwen2.5-7B-Instruct on transformers" in text
    served = EngineConfig(lm_backend="openai", lm_model="meta-llama/Llama-3.1-8B-Instruct").describe()
    assert "answers Llama-3.1-8B-Instruct on an OpenAI-compatible engine" in served


def test_lm_batching_on_an_engine_that_cannot_batch_is_said_not_silently_ignored():
    assert EngineConfig(lm_backend="transformers", lm_batching=True).ignored() == []
    assert EngineConfig().ignored() == []
    [said] = EngineConfig(lm_batching=True).ignored()
    assert "transformers engine only; llama.cpp runs one generation at a time per unit" in said


@pytest.mark.django_db
def test_the_page_says_which_models_answer():
    page = Client().get("/").content.decode()
    assert 'id="models"' in page and "GPU" in page


def test_a_model_for_answers_is_named_with_the_one_that_makes_the_calls():
    text = EngineConfig(lm_answer_model="qwen2.5-coder-1.5b-instruct-q4_k_m").describe()
    assert "answers qwen2.5-coder-1.5b-instruct-q4_k_m (calls: Qwen2.5-Coder-0.5B-Instruct) on llama.cpp" in text
