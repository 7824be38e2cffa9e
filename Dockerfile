# Baton: one image for the API, the director and stand-alone schedulers (the args choose).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
    && useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin baton
USER 10001
EXPOSE 8000
ENTRYPOINT ["baton"]
CMD ["serve", "--host", "0.0.0.0"]
