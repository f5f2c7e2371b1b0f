"""The file was cut off while uploading and is not valid JSON: status invalid_json, 0, a feedback page saying why."""

ASSIGNMENT = "day01_gpu_model"
RAW = '{\n "cells": [\n  {\n   "cell_type": "code",\n   "source": ["import course'
EXPECT = {"status": "invalid_json", "total": 0}
